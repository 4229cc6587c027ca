"""One Rich console on stderr for progress, notices and errors, so stdout stays clean for results."""

from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, highlight=False, emoji=False)  # ":name:" in a file name is text


def notice(message: str) -> None:
    err.print(f"[yellow]note:[/yellow] {escape(message)}", soft_wrap=True)


def info(message: str) -> None:
    err.print(escape(message), soft_wrap=True)


def error(message: str) -> None:
    err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)


def warning(message: str) -> None:
    err.print(f"[bold yellow]warning:[/bold yellow] {escape(message)}", soft_wrap=True)
