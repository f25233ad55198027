"""The failures of a started run, each told in one line: what happened, where, and what to try."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from lightning_gpu_engine.config.cli import fail
from lightning_gpu_engine.config.options import Config
from lightning_gpu_engine.config.values import ConfigError
from lightning_gpu_engine.tools.rundir import last_path

if TYPE_CHECKING:
    import lightning as L


@contextmanager
def explain_failures(
    cfg: Config, trainer: L.Trainer, datamodule: L.LightningDataModule, unit: str = "samples"
) -> Iterator[None]:
    """Turns the failures of a started run into one line: what happened, where, and what to try. `unit`: the task's
    samples (images), for the out-of-memory line."""
    import torch
    from lightning.pytorch.trainer.states import TrainerFn
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lightning_gpu_engine.checkpoint.saving import CheckpointSpaceError, NonFiniteWeightsError
    from lightning_gpu_engine.checkpoint.staging import shown
    from lightning_gpu_engine.checkpoint.store import StoreError
    from lightning_gpu_engine.reliability.guards import NonFiniteLossError
    from lightning_gpu_engine.reliability.stop_on_signal import StopOnSignal

    try:
        yield
    except ConfigError as err:
        stop = next((cb for cb in trainer.callbacks if isinstance(cb, StopOnSignal)), None)  # type: ignore[attr-defined]
        if stop is None or not stop.saved:
            fail(str(err))
        # the next batch's read failed (an outage): the step before was saved, and a stop noted meanwhile is honoured
        print(f"error: {err}", file=sys.stderr)
        signum, where = stop.signum or 0, shown(stop.path)
        step = trainer.global_step
        if signum:
            said = (
                f"stopped by {signal.Signals(signum).name} at step {step}: saved {where}; continue with --resume last"
            )
        else:
            said = f"step {step}, the last one done, is saved in {where}: --resume last continues from it"
        print(said, file=sys.stderr)
        raise SystemExit(128 + signum if signum else 2) from None
    except (NonFiniteLossError, NonFiniteWeightsError) as err:
        last = last_path(cfg.output_dir)
        kept = f"the last good checkpoint {shown(last)} is untouched" if last.exists() else "no checkpoint was written"
        # A fresh start: a resumed run would continue the saved optimizer and schedule
        fail(
            f"{err}; {kept}. Start again in another --output-dir with a lower --lr (now {cfg.lr:g}) or "
            "--gradient-clip-val 1.0, and --precision bf16-mixed rather than 16-mixed (fp16 overflows where bf16 "
            "does not)",
            code=1,
        )
    except torch.OutOfMemoryError:
        size = datamodule.hparams.get("batch_size", cfg.batch_size)
        fail(
            f"--batch-size: out of memory with {size} {unit} per device; "
            f"lower it, e.g. --batch-size {max(1, size // 2)} --accumulate-grad-batches "
            f"{2 * cfg.accumulate_grad_batches} keeps the global batch, or let --auto-batch-size find what fits",
            code=1,
        )
    except CheckpointSpaceError as err:
        fail(
            f"--output-dir: {err.strerror}; the previous checkpoint is untouched. Free space or choose another "
            "--output-dir, then --resume last",
            code=1,
        )
    except StoreError as err:  # an object-storage --output-dir that stopped answering: during a stop's save, too
        stop = next((cb for cb in trainer.callbacks if isinstance(cb, StopOnSignal)), None)  # type: ignore[attr-defined]
        if trainer.is_global_zero:  # every rank knows, rank 0 says
            print(f"error: --output-dir: {err}", file=sys.stderr, flush=True)
        raise SystemExit(128 + stop.signum if stop and stop.signum else 1) from None
    except (SIGTERMException, KeyboardInterrupt) as err:
        # KeyboardInterrupt: a second Ctrl-C once Lightning has put the default handlers back, after the save
        stop = next((cb for cb in trainer.callbacks if isinstance(cb, StopOnSignal)), None)  # type: ignore[attr-defined]
        signum = (stop.signum if stop else None) or (
            signal.SIGINT if isinstance(err, KeyboardInterrupt) else signal.SIGTERM
        )
        name = signal.Signals(signum).name
        if trainer.is_global_zero and trainer.state.fn == TrainerFn.TESTING:
            config = Path(cfg.output_dir, "config.yaml")
            print(
                f"stopped by {name} during the final test, which did not finish; training is complete and saved. "
                f"Test it with: python {Path(sys.argv[0]).name} --config {config} --resume last",
                file=sys.stderr,
            )
        elif trainer.is_global_zero:
            where = shown(stop.path) if stop else ""
            saved = f"saved {where}; continue with --resume last" if stop and stop.saved else "nothing to save yet"
            print(f"stopped by {name} at step {trainer.global_step}: {saved}", file=sys.stderr)
        raise SystemExit(128 + signum) from None
