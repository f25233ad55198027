"""Keep the chosen task's files only: the engine and its tests are shared, each task brings its own entry points,
folder, configs, tests and README. `_variants/<task>/` holds the chosen task's versions of shared files."""

import shutil
from pathlib import Path

TASK = "{{ cookiecutter.task }}"
PACKAGE = "{{ cookiecutter.package_name }}"

# Files of one task only (and those the other task replaces with its own from _variants/); the template's tests read
# this mapping to know what each bake holds
ONLY = {
    "image-classification": [
        "predict.py",
        "export.py",
        "bench.py",
        "configs/gpu-resnet50.yaml",
        "tests/gpu",
        "tests/trained_model.py",
        "tests/dump_ranks.py",
        "tests/pause_ranks.py",
        "tests/test_bench.py",
        "tests/test_checkpoints.py",
        "tests/test_config.py",
        "tests/test_data.py",
        "tests/test_distributed.py",
        "tests/test_export.py",
        "tests/test_failures.py",
        "tests/test_finetune.py",
        "tests/test_folder_resume.py",
        "tests/test_fsdp_layout.py",
        "tests/test_full_disk.py",
        "tests/test_hardware.py",
        "tests/test_inputs.py",
        "tests/test_layout.py",
        "tests/test_model.py",
        "tests/test_model_zoo.py",
        "tests/test_monitors.py",
        "tests/test_multinode.py",
        "tests/test_predict.py",
        "tests/test_pretrained.py",
        "tests/test_resume.py",
        "tests/test_resume_changes.py",
        "tests/test_stops.py",
        "tests/test_sweep.py",
        "tests/test_tool_stops.py",
        "tests/test_train.py",
        "tests/test_transfer.py",
        "tests/test_transforms.py",
        "tests/test_validation_stop.py",
        "src/{package}/tasks/image_classification",
    ],
    "language-model": [
        "generate.py",
        "train_tokenizer.py",
        "tests/test_language_model.py",
        "tests/test_text_data.py",
        "tests/test_lm_inputs.py",
        "tests/test_lm_bench.py",
        "tests/test_gpu_language_model.py",
        "src/{package}/tasks/language_model",
    ],
}

for task, paths in ONLY.items():
    for path in (Path(p.format(package=PACKAGE)) for p in (paths if task != TASK else [])):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
variants = Path("_variants", TASK)
for source in sorted(p for p in variants.rglob("*") if p.is_file()):
    shutil.copyfile(source, source.relative_to(variants))
shutil.rmtree("_variants")
