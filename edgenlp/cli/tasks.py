"""``edgenlp tasks``: list the built-in tasks."""

from __future__ import annotations

import click

from edgenlp.cli.options import data_dir_option


@click.command("tasks")
@data_dir_option
def tasks_cmd(data_dir: str | None) -> None:
    """List built-in tasks; a folder with train.tsv and dev.tsv also works as TASK.

    \b
    Examples:
      edgenlp tasks
      edgenlp tasks --data-dir ../shared/data
    """
    from edgenlp.data.tasks import BUILTIN_TASKS, resolve_task_dir

    for name, spec in BUILTIN_TASKS.items():
        _, folder, _ = resolve_task_dir(name, data_dir)
        state = "ok" if (folder / "train.tsv").exists() else "missing"
        click.echo(f"{name:<10} {spec.description}  [{folder}: {state}]")
    click.echo("\nYour own task: --task path/to/dir with train.tsv and dev.tsv (header text<TAB>label).")
