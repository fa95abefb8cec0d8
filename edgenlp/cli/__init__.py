"""The ``edgenlp`` command line.

Each verb is a module of this package (``edgenlp/cli/<verb>.py``) that parses
options and calls one API function; it is imported only when invoked, so ``edgenlp --help`` stays fast. To add a verb,
add one line to :data:`COMMANDS`. A verb that builds a config takes its options
from the config's fields, and every verb takes the shared ones (task and data,
output, threads, device, ``--json``) from :mod:`edgenlp.cli.options`.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import click

from edgenlp import __version__
from edgenlp.errors import EdgeNLPError, ExitCode

# verb -> ("module", "attribute", "one-line help shown by `edgenlp --help`")
COMMANDS: dict[str, tuple[str, str, str]] = {
    "models": ("edgenlp.cli.models", "models_cmd", "List the known models and their shapes."),
    "tasks": ("edgenlp.cli.tasks", "tasks_cmd", "List the built-in tasks and where their data lives."),
    "export": ("edgenlp.cli.export", "export_cmd", "Lower a model to an ExecuTorch/ONNX bundle."),
    "run": ("edgenlp.cli.run", "run_cmd", "Classify texts with a bundle."),
    "eval": ("edgenlp.cli.run", "eval_cmd", "Measure a bundle's accuracy through its runtime."),
    "inspect": ("edgenlp.cli.export", "inspect_cmd", "Verify a bundle and print its manifest."),
    "quantize": ("edgenlp.cli.quantize", "quantize_cmd", "Quantize a model to an int8/int4/mixed bundle with an accuracy guard."),
    "profile": ("edgenlp.cli.profile", "profile_cmd", "Per-component params, FLOPs, memory and latency (eager/ExecuTorch/ONNX/native)."),
    "finetune": ("edgenlp.cli.finetune", "finetune_cmd", "Fine-tune cheaply: Learners with priming, FAR, or a baseline."),
    "prune": ("edgenlp.cli.prune", "prune_cmd", "Structured pruning (CoFi, fast post-training, importance) to a smaller model."),
    "distill": ("edgenlp.cli.distill", "distill_cmd", "Recovery distillation of a pruned model from its teacher."),
    "sparsify": ("edgenlp.cli.sparsify", "sparsify_cmd", "Block sparsity (gradual magnitude pruning under distillation)."),
    "dynamic": ("edgenlp.cli.dynamic", "dynamic_cmd", "Early exits and learned token pruning for a fine-tuned model."),
    "tokenize": ("edgenlp.cli.tokenize", "tokenize_cmd", "Print token ids of texts (native or Hugging Face tokenizer)."),
    "targets": ("edgenlp.cli.targets", "targets_cmd", "Device targets: list, show, calibrate the cost model."),
    "demo": ("edgenlp.cli.demo", "demo_cmd", "Fine-tune, export, evaluate (default MiniLM + SST-2), no compression."),
    "compress": ("edgenlp.cli.compress", "compress_cmd", "The main job: fine-tune, prune, quantize, export, verify under a device budget."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):  # one-line errors, non-zero exit, no traceback
        try:
            return super().invoke(ctx)
        except EdgeNLPError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # a verb's bad option or argument (parsed inside invoke)
            where = exc.ctx.command_path if exc.ctx else ctx.command_path
            message = " ".join(exc.format_message().split())
            click.echo(f"error: {where}: {message} (see {where} --help)", err=True)
            ctx.exit(ExitCode.USER_ERROR)
        except FileNotFoundError as exc:
            click.echo(f"error: file not found: {exc.filename or exc}", err=True)
            ctx.exit(ExitCode.USER_ERROR)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            ctx.exit(ExitCode.INTERRUPTED)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="edgenlp")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def main(verbose: int) -> None:
    """edgenlp: fine-tune, compress, lower and profile BERT-family models for devices.

    \b
    Examples:
      edgenlp models
      edgenlp export minilm-l6 --task sst2 --format both --out out/minilm-sst2
      edgenlp run out/minilm-sst2 "a gripping, funny film"
      edgenlp eval out/minilm-sst2 --task sst2 --runtime onnx --json
    """
    level = logging.WARNING - 10 * verbose
    logging.basicConfig(level=max(level, logging.DEBUG), format="%(levelname)s %(name)s: %(message)s")
    if verbose < 2:  # third-party import chatter (torchao optional kernels, torch pytree notices)
        for name in ("torchao", "torch", "transformers", "executorch", "onnxscript", "onnx_ir"):
            logging.getLogger(name).setLevel(logging.ERROR)
        import warnings

        warnings.filterwarnings("ignore")
        os.environ.setdefault("TORCH_LOGS", "-all")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(prog_name="edgenlp"))
