"""A bake keeps itself current: its dependency bot's config passes that bot's own validator, its workflows pass
actionlint, and its template-update script brings a newer template commit in while keeping the team's changes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema
from conftest import BIN, TEMPLATE, bake, run
from jsonschema.validators import validator_for
from test_cruft import GIT_ENV, commit_all, cruft, git

# Renovate's own validator, its whole tree pinned by .ci/renovate/package-lock.json and installed by `npm ci` in CI's
# setup step (.ci/run), which tries the registry three times and then stops CI with npm's error: a registry that fails
# fails the setup, loudly, and never turns this check into a skip
VALIDATOR = TEMPLATE / ".ci" / "renovate" / "node_modules" / ".bin" / "renovate-config-validator"
INSTALL = "npm ci --prefix .ci/renovate --ignore-scripts"
NODE = shutil.which("node")


def renovate_validator(project: Path) -> subprocess.CompletedProcess[str]:
    """The validator's verdict on the bake's renovate.json."""
    assert VALIDATOR.exists(), f"Renovate's validator is not installed: run `{INSTALL}` (CI's setup step does)"
    return run(VALIDATOR, "--strict", "--no-global", "renovate.json", cwd=project, timeout=120)


@pytest.mark.skipif(NODE is None, reason="Renovate's validator needs Node.js, which is not installed")
def test_renovate_config_passes_renovates_validator_and_groups_what_moves_together(tmp_path: Path) -> None:
    project = bake(tmp_path, dependency_bot="renovate", cooldown_days="5")
    assert not (project / ".github" / "dependabot.yml").exists(), "one bot, or every update comes twice"
    config = json.loads((project / "renovate.json").read_text())
    assert config["minimumReleaseAge"] == "5 days"
    groups = {r["groupName"]: r["matchPackageNames"] for r in config["packageRules"] if "groupName" in r}
    assert groups == {
        "torch": ["torch", "torchvision"],
        "lightning": ["lightning", "torchmetrics"],
        "ruff": ["ruff", "astral-sh/ruff-pre-commit"],
    }
    result = renovate_validator(project)
    assert result.returncode == 0, result.stdout + result.stderr
    config["packageRules"].append({"groupName": "a rule that matches nothing"})
    (project / "renovate.json").write_text(json.dumps(config))
    assert renovate_validator(project).returncode != 0, "the validator must be able to say no"


def test_dependabot_config_passes_its_schema_with_the_cooldown(tmp_path: Path) -> None:
    project = bake(tmp_path, dependency_bot="dependabot", cooldown_days="14")
    assert not (project / "renovate.json").exists(), "one bot, or every update comes twice"
    config = yaml.safe_load((project / ".github" / "dependabot.yml").read_text())
    dependabot = get_builtin_schema("vendor.dependabot")  # SchemaStore's schema, as check-jsonschema ships it
    schema = validator_for(dependabot)(dependabot)
    assert not [e.message for e in schema.iter_errors(config)]
    assert {u["package-ecosystem"]: u["cooldown"]["default-days"] for u in config["updates"]} == {
        "uv": 14,
        "pre-commit": 14,
        "github-actions": 14,
    }
    (uv,) = [u for u in config["updates"] if u["package-ecosystem"] == "uv"]
    assert uv["groups"]["torch"]["patterns"] == ["torch", "torchvision"]
    uv["cooldown"]["default-days"] = 0
    assert list(schema.iter_errors(config)), "the schema must be able to say no"


def test_every_workflow_passes_actionlint(tmp_path: Path) -> None:
    project = bake(tmp_path / "bake")
    workflows = sorted((project / ".github" / "workflows").glob("*.yml"))
    assert {w.name for w in workflows} == {"ci.yml", "gpu.yml", "template-update.yml"}
    config = project / ".github" / "actionlint.yaml"
    result = run(BIN / "actionlint", "-no-color", "-config-file", config, *workflows, cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(workflows[-1].read_text().replace("steps.update.outputs", "steps.nonesuch.outputs"))
    assert run(BIN / "actionlint", "-no-color", "-config-file", config, broken, cwd=project).returncode != 0


def test_the_update_script_brings_template_commits_keeps_the_teams_changes_and_never_resets_their_branch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in GIT_ENV.items():
        monkeypatch.setenv(key, value)
    template = tmp_path / "template"
    template.mkdir()
    shutil.copy(TEMPLATE / "cookiecutter.json", template)
    for folder in ("hooks", "engine", "{{cookiecutter.project_slug}}"):  # engine/: the wheel the post-gen hook builds
        shutil.copytree(TEMPLATE / folder, template / folder, ignore=shutil.ignore_patterns("__pycache__", ".*_cache"))
    git(template, "init", "-q")
    commit_all(template, "template A")
    code, out = cruft(tmp_path, "create", "--no-input", "--output-dir", "projects", str(template))
    assert code == 0, out
    project = tmp_path / "projects" / "image-classifier"
    git(project, "init", "-q")
    commit_all(project, "generated from A")
    quickstart, dockerignore = project / "configs" / "cpu-quickstart.yaml", project / ".dockerignore"
    quickstart.write_text(quickstart.read_text() + "seed: 7  # the team's own\n")
    dockerignore.write_text(dockerignore.read_text().replace("outputs/", "outputs/\nteam-cache/"))
    # what an update from the copied engine leaves of a team's change to it: a file that no import reaches any more
    left = project / "src" / "image_classifier" / "engine" / "hardware.py"
    left.parent.mkdir()
    left.write_text("PATCHED = True\n")
    commit_all(project, "the team's changes")

    source = template / "{{cookiecutter.project_slug}}"
    readme = source / "README.md"
    readme.write_text(readme.read_text() + "\nA template fix for {{ cookiecutter.project_name }}.\n")
    ignore = source / ".dockerignore"  # the same line the team changed: a conflict for a person
    ignore.write_text(ignore.read_text().replace("outputs/", "outputs/\ntemplate-cache/"))
    commit_all(template, "template B")
    commit_b = run("git", "rev-parse", "HEAD", cwd=template).stdout.strip()

    path = os.pathsep.join([str(BIN), os.environ["PATH"]])  # cruft, as the workflow puts it on PATH
    body = tmp_path / "body.md"
    script = [sys.executable, "scripts/template_update.py", "--branch", "template-update", "--body", body]
    result = run(*script, cwd=project, env={"PATH": path})
    assert result.returncode == 0, result.stdout + result.stderr

    assert run("git", "branch", "--show-current", cwd=project).stdout.strip() == "template-update"
    assert run("git", "status", "--porcelain", cwd=project).stdout == "", "everything is in the one commit"
    assert json.loads((project / ".cruft.json").read_text())["commit"] == commit_b
    assert "A template fix for Image Classifier." in (project / "README.md").read_text()
    assert quickstart.read_text().endswith("seed: 7  # the team's own\n")
    assert "team-cache/" in dockerignore.read_text()
    text = body.read_text()
    assert commit_b[:12] in text and "need a person" in text
    listed = [line.removeprefix("- [ ] `").removesuffix("`") for line in text.splitlines() if line.startswith("- [ ]")]
    assert [f.removesuffix(".rej") for f in listed] == [".dockerignore", "src/image_classifier/engine/hardware.py"], (
        text
    )
    assert "2 file(s) need a person" in result.stdout
    assert "README.md" not in text

    body.unlink()
    again = run(*script, cwd=project, env={"PATH": path})
    assert again.returncode == 0 and "up to date" in again.stdout, again.stdout + again.stderr
    assert not body.exists(), "nothing to open a pull request for"

    # A person resolves the conflict on the update branch, and pushes it; the next update starts from main again
    (project / ".dockerignore.rej").unlink(missing_ok=True)
    markers = ("<<<<<<<", "=======", ">>>>>>>")
    kept_lines = [line for line in dockerignore.read_text().splitlines() if not line.startswith(markers)]
    dockerignore.write_text("\n".join(kept_lines) + "\n")
    commit_all(project, "the team's resolution")
    resolution = branch_head(project, "template-update")
    remote = tmp_path / "remote.git"
    assert run("git", "init", "-q", "--bare", remote, cwd=tmp_path).returncode == 0
    git(project, "remote", "add", "origin", str(remote))
    git(project, "push", "-q", "origin", "main", "template-update")
    git(project, "switch", "-q", "main")
    git(project, "branch", "-q", "-D", "template-update")  # as CI's checkout has it: on the remote only
    readme.write_text(readme.read_text() + "\nA second template fix.\n")
    commit_all(template, "template C")

    before = status(project)
    refused = {  # each: one line, exit 2, and the user left where they were, with nothing changed
        "not a repository": (tmp_path, {"PATH": path}, "is not in a git repository"),
        "cruft missing": (project, {"PATH": "/usr/bin:/bin"}, "cruft is not on PATH"),
    }
    (project / "README.md").write_text((project / "README.md").read_text() + "an edit not committed\n")
    refused["uncommitted change"] = (project, {"PATH": path}, "the work tree has 1 uncommitted change(s)")
    anywhere = [sys.executable, project / "scripts" / "template_update.py", *script[2:]]
    for case, (where, env, said) in refused.items():
        result = run(*anywhere, cwd=where, env=env)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and said in lines[0], (case, result.stderr)
        assert status(project) == {**before, "changed": [" M README.md"]}, case
    git(project, "checkout", "-q", "README.md")
    assert status(project) == before

    pushed = run(*script, "--push", "origin", cwd=project, env={"PATH": path})
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    kept = "template-update holds commits that main lacks (a person's work, perhaps): left as it is"
    assert f"{kept}; this update goes on template-update-2" in pushed.stdout, pushed.stdout
    assert run("git", "branch", "--show-current", cwd=project).stdout.strip() == "template-update-2"
    assert branch_head(remote, "template-update") == resolution, "the person's branch is untouched on the remote"
    assert branch_head(remote, "template-update-2") == branch_head(project, "template-update-2")


def branch_head(repo: Path, branch: str) -> str:
    return run("git", "rev-parse", f"refs/heads/{branch}", cwd=repo).stdout.strip()


def status(project: Path) -> dict[str, object]:
    """The branch checked out, its commit, and what the work tree holds that is not committed."""
    branch = run("git", "branch", "--show-current", cwd=project).stdout.strip()
    changed = run("git", "status", "--porcelain", cwd=project).stdout.splitlines()
    return {"branch": branch, "head": branch_head(project, branch), "changed": changed}
