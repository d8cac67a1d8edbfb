"""Command-line entry point: ``liquid-stream``.

This module only wires commands: each lives in its own package's CLI module
(``liquid_stream.training.cli``, ``.training.data.cli``, ``.export.cli``, ``.apps.*.cli``)
and is named in :data:`COMMANDS`. The ``main`` group imports a command's module only
when that command is run or listed (``liquid-stream --help``), and those modules import
only click at module level (torch, onnx, ... inside the command functions), so
``import liquid_stream.cli`` and ``liquid-stream --help`` stay fast and torch-free.

This is an entry point of the layering rule (docs: tests/test_layering.py): it may name
commands of every layer; the core package never imports training, export or apps.
"""

from __future__ import annotations

import importlib

import click

from liquid_stream import __version__

# command name → "module:attribute" of its click command. A module that is not present in
# this checkout (an app left out) drops its commands.
COMMANDS = {
    "train": "liquid_stream.training.cli:train_cmd",
    "evaluate": "liquid_stream.training.cli:evaluate_cmd",
    "data": "liquid_stream.training.data.cli:data",
    "export": "liquid_stream.export.cli:export_cmd",
    "kws": "liquid_stream.apps.kws.cli:kws_cmd",
    "kws-eval": "liquid_stream.apps.kws.cli:kws_eval_cmd",
    "kws-tune": "liquid_stream.apps.kws.cli:kws_tune_cmd",
    "vitals": "liquid_stream.apps.vitals.cli:vitals_cmd",
    "serve": "liquid_stream.apps.serve.cli:serve_cmd",
    "stream-to": "liquid_stream.apps.serve.cli:stream_to_cmd",
}


CONTEXT = {"help_option_names": ["-h", "--help"]}
# third-party modules of an extra (pyproject.toml) → the extra; the base install (the apps)
# has none of them, so a command that needs one says which extra to install
EXTRA_OF = {
    "torch": "train",
    "scipy": "train",
    "neurokit2": "train",
    "yaml": "train",
    "tqdm": "train",
    "tensorboard": "train",
    "PIL": "train",
    "matplotlib": "plots",
}


class LazyGroup(click.Group):
    """A click group whose ``lazy`` commands (name → ``"module:attribute"``) are imported
    the first time they are looked up (run, or listed by ``--help``)."""

    def __init__(self, *args, lazy: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy:
            module_name, attr = self.lazy[name].split(":")
            try:
                module = importlib.import_module(module_name)
            except ModuleNotFoundError as e:
                if e.name != module_name:  # a broken import inside the module: surface it
                    raise
                return None  # the module is not in this checkout
            self.add_command(getattr(module, attr), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        """Run the command; a module of a missing extra becomes one line naming the extra."""
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as e:
            root = (e.name or "").split(".")[0]
            if root not in EXTRA_OF:
                raise
            extra = EXTRA_OF[root]
            raise click.ClickException(
                f"`liquid-stream {ctx.invoked_subcommand}` needs {root!r}, which the base "
                f"install leaves out: pip install 'liquid-stream[{extra}]'"
            ) from None


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings=CONTEXT)
@click.version_option(__version__, "--version", "-V", prog_name="liquid-stream")
def main() -> None:
    """liquid-stream: train causal Liquid-S4 models, export them step-wise to ONNX,
    and run them on live streams."""


if __name__ == "__main__":  # pragma: no cover
    main()
