"""The option language the command-line tools share (docs/CLI.md states it).

One definition of each shared option: the trie host's address and TLS
(``host_options``: every tool that connects to a host), ``--json``,
``-q/--quiet``, ``-j/--threads``, the search parameters built from the
tables of ``ngram_service.params`` (``param_option``, ``param_list_option``:
ranges checked by the parser, naming the flag), and old spellings that keep
working for now with a one-line deprecation warning naming the new one
(``deprecated_option``; the commands are ``ToolCommand`` / ``ToolGroup``,
which apply them once parsing is done). Bad input is refused where it is
parsed, naming the option: ``IntRange`` / ``FiniteFloatRange`` (numbers),
``comma_items`` (lists), ``TargetType`` (a host's address), ``OutputFile``
(a file a command writes, checked before any work).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

import click
from click.core import ParameterSource

from ngram_service.params import Param
from ngram_service.targets import TARGET_FORMS, target_problem

__all__ = ["CONTEXT_SETTINGS", "HOST_OPTIONS", "MAX_DEADLINE_MS", "DeadlineMs", "DeprecatedOption", "Deprecation",
           "FiniteFloatRange", "IntRange", "OutputFile", "TargetType", "ToolCommand", "ToolGroup", "comma_items",
           "deprecated_option", "deprecations", "given_options", "host_options", "json_option", "param_list_option",
           "param_option", "quiet_option", "refuse_given", "threads_option", "tls_client_options"]

#: Every tool: -h and --help, and help text up to 100 columns wide.
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _a_number(kind: click.ParamType, value: Any, cast: Callable[[str], Any], word: str,
              param: click.Parameter | None, ctx: click.Context | None) -> None:
    """Fails as "not a valid integer/float" for a string that is no number at
    all (click's range types say "not a valid integer range")."""
    if isinstance(value, str):
        try:
            cast(value)
        except ValueError:
            kind.fail(f"{value!r} is not a valid {word}.", param, ctx)


class IntRange(click.IntRange):
    """click.IntRange, whose message for a value that is no number says "not a valid integer"."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _a_number(self, value, int, "integer", param, ctx)
        return super().convert(value, param, ctx)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that refuses nan and inf, which pass its comparisons
    (and says "not a valid float" for a value that is no number)."""

    def _describe_range(self) -> str:
        return "finite" if self.min is None and self.max is None else super()._describe_range()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        _a_number(self, value, float, "float", param, ctx)
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def param_type(p: Param) -> click.ParamType:
    """The click type of a parameter's value (of each, for a list): its
    range, checked by the parser."""
    if p.type is int:
        return IntRange(p.low, p.high)  # type: ignore[arg-type]
    if p.type in (float, list):  # a list holds a weight per level
        return FiniteFloatRange(p.low, p.high)
    raise TypeError(f"{p.name}: no range type for {p.type.__name__}")


def _with_prefix(prefix: str, text: str) -> str:
    return f"{prefix} {text[0].lower()}{text[1:]}" if prefix else text


def param_option(p: Param, *, help_prefix: str = "", default: Any = ..., show_default: Any = True) -> Decorator:
    """The option of one parameter: its flag (``--x/--no-x`` for a switch, a
    comma-separated list for a weight per level), range, the engine's
    default unless ``default`` is given, and help (after ``help_prefix``,
    e.g. "DART:")."""
    value = p.default if default is ... else default
    help_text = _with_prefix(help_prefix, p.help)
    if p.type is list:
        return param_list_option(p, help_prefix=help_prefix, default=value, show_default=show_default)
    if p.type is bool:
        return click.option(f"{p.flag}/--no-{p.flag[2:]}", p.name, default=value, show_default=show_default,
                            help=help_text)
    return click.option(p.flag, p.name, type=param_type(p), default=value, show_default=show_default,
                        help=help_text)


def param_list_option(p: Param, *, help_prefix: str = "", default: Sequence[Any] | None = (),
                      show_default: Any = True) -> Decorator:
    """A comma-separated list of a parameter's values (a grid to try, or a
    list parameter's value), each in the parameter's range; the option's
    value is the list. ``default``: the values when not given (empty: the
    parameter's default; None: None, a default the command or the engine
    chooses, described by ``show_default`` or the help)."""
    kind = param_type(p)

    def parse(ctx: click.Context, param: click.Parameter, text: str | None) -> list[Any] | None:
        if text is None:
            return None
        return [kind.convert(x, param, ctx) for x in comma_items(text, ctx, param)]

    values = None if default is None else list(default) or [p.default]
    return click.option(p.flag, p.name, default=None if values is None else ",".join(map(_number, values)),
                        show_default=show_default, callback=parse, metavar="LIST",
                        help=_with_prefix(help_prefix, p.help) + f" Comma-separated, each {p.describe_range()}.")


def _number(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def comma_items(text: str, ctx: click.Context | None = None, param: click.Parameter | None = None,
                param_hint: str | None = None) -> list[str]:
    """The items of a comma-separated option value, stripped. An empty item
    (``1,,2``, a trailing comma) is a usage error naming the option: dropping
    it would silently change what the list says."""
    items = [x.strip() for x in text.split(",")]
    if items == [""]:
        raise click.BadParameter("give at least one value", ctx, param, param_hint)
    if "" in items:
        raise click.BadParameter(f"{text!r} has an empty item: give a value between every two commas",
                                 ctx, param, param_hint)
    return items


class OutputFile(click.Path):
    """A file a command writes (through a temporary file beside it, then a
    rename): refused when parsed, before any work, when it is a folder, its
    folder does not exist or cannot be written, or it exists and cannot be
    written; otherwise the work would be lost to a late error."""

    def __init__(self) -> None:
        super().__init__(dir_okay=False, writable=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if str(value) == "":
            self.fail("give a file name", param, ctx)
        rv = super().convert(value, param, ctx)  # a folder, an existing file not writable
        folder = os.path.dirname(os.path.abspath(os.fsdecode(rv)))
        if not os.path.isdir(folder):
            why = "does not exist" if not os.path.exists(folder) else "is not a folder"
            self.fail(f"{os.fsdecode(value)!r}: its folder {folder} {why}.", param, ctx)
        if not os.access(folder, os.W_OK | os.X_OK):
            self.fail(f"{os.fsdecode(value)!r}: its folder {folder} is not writable.", param, ctx)
        return rv


def json_option(help_text: str = "Print JSON on stdout instead of text.") -> Decorator:
    """--json: the command's output as JSON on stdout instead of its text form."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def quiet_option() -> Decorator:
    """-q/--quiet: no progress lines on stderr."""
    return click.option("--quiet", "-q", is_flag=True, help="No progress lines on stderr.")


def threads_option(help_text: str, default: int = 1, show_default: Any = True) -> Decorator:
    """-j/--threads N: how much of the command runs at once."""
    return click.option("--threads", "-j", "threads", type=IntRange(1), default=default,
                        show_default=show_default, help=help_text)


#: The longest --deadline-ms: a day. gRPC holds a deadline in int64 nanoseconds, which overflow past about
#: 9.2e12 ms (the call then fails at once with DEADLINE_EXCEEDED); no call to a trie host needs a day.
MAX_DEADLINE_MS = 86_400_000.0


class DeadlineMs(FiniteFloatRange):
    """--deadline-ms: milliseconds, > 0 and at most MAX_DEADLINE_MS (checked
    apart, so that the help and the message for 0 keep saying x>0)."""

    def __init__(self) -> None:
        super().__init__(min=0, min_open=True)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if rv > MAX_DEADLINE_MS:
            self.fail(f"{rv:g} is more than {MAX_DEADLINE_MS:.0f} (a day), the longest deadline.", param, ctx)
        return rv


class TargetType(click.ParamType):
    """A trie host's address (target_problem), checked when parsed: a bad
    one would otherwise be dialed (a missing port as 443, a port above
    65535 wrapped) and fail, or time out, at the first call."""

    name = "host:port"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        why = target_problem(str(value))
        if why:
            self.fail(f"{value!r}: {why}; give {TARGET_FORMS}.", param, ctx)
        return value


#: The options of a connection to a trie host, by parameter name (host_options).
HOST_OPTIONS = {"targets": "--target", "index": "--index", "deadline_ms": "--deadline-ms", "ca": "--ca",
                "cert": "--cert", "key": "--key", "server_name": "--server-name"}


def host_options(*, default_target: str | None, deadline_ms: float, deadline_help: str) -> Decorator:
    """--target HOST:PORT (repeat for replicas), --index, --deadline-ms and
    TLS (--ca, --cert, --key, --server-name): how every tool that connects to
    a trie host names it."""
    target_help = "A trie host, HOST:PORT (repeat to balance over several)."
    if default_target is not None:
        target_help += " The default is ngram-serve's default --port on this machine."
    options = [
        click.option("--target", "targets", multiple=True, type=TargetType(), metavar="HOST:PORT",
                     default=[default_target] if default_target else [], show_default=default_target is not None,
                     help=target_help),
        click.option("--index", default="", help="Index name on the host [default: the host's first]."),
        click.option("--deadline-ms", type=DeadlineMs(), default=deadline_ms,
                     show_default=True, help=deadline_help),
        click.option("--ca", type=click.Path(exists=True, dir_okay=False),
                     help="CA certificate (PEM) to verify the host with: use TLS."),
        click.option("--cert", type=click.Path(exists=True, dir_okay=False),
                     help="Client certificate (PEM) for mutual TLS, with --key."),
        click.option("--key", type=click.Path(exists=True, dir_okay=False),
                     help="Client private key (PEM) for mutual TLS, with --cert."),
        click.option("--server-name", default=None, help="Name to verify the host's certificate against "
                                                         "[default: the HOST of --target]."),
    ]

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


def tls_client_options(ca: str | None, cert: str | None, key: str | None,
                       server_name: str | None) -> dict[str, Any]:
    """host_options' TLS values as NgramClient's keywords (none when not given)."""
    if (cert is None) != (key is None):
        raise click.UsageError("--cert and --key go together (a client certificate and its key)")
    given = {"root_certificates": ca, "certificate_chain": cert, "private_key": key, "server_name": server_name}
    return {k: v for k, v in given.items() if v is not None}


# ---- old spellings --------------------------------------------------------------------------------------

_DEPRECATED = "ngram.deprecated"  # ctx.meta key: [(Deprecation, value)] given on this command line


class Deprecation:
    """An old spelling of an option: which parameter it sets now (None: the
    command reads the old option itself), under which flag, and how its
    value converts (a unit that changed)."""

    def __init__(self, old: str, new: str, param: str | None, convert: Callable[[Any], Any] | None = None,
                 note: str = "") -> None:
        self.old, self.new, self.param, self.convert, self.note = old, new, param, convert, note

    def message(self, tool: str) -> str:
        """The warning line: ``ngram-query: -t is deprecated: use --target``."""
        return f"{tool}: {self.old} is deprecated: use {self.new}{self.note}"


class DeprecatedOption(click.Option):
    """The hidden option of an old spelling; ``deprecation`` says what replaced it."""

    def __init__(self, *args: Any, deprecation: Deprecation, **kwargs: Any) -> None:
        super().__init__(*args, hidden=True, **kwargs)
        self.deprecation = deprecation


def deprecated_option(*decls: str, new: str, param: str, convert: Callable[[Any], Any] | None = None,
                      note: str = "", **kwargs: Any) -> Decorator:
    """A hidden option that still accepts an old spelling (``decls``): once
    parsing is done it sets ``param`` (the option ``new``), converted, and
    prints one warning line naming ``new``. Given together with ``new``, it is
    a usage error. ``kwargs`` are the old option's own (type, multiple)."""
    dep = Deprecation(decls[0], new, param, convert, note)

    def record(ctx: click.Context, p: click.Parameter, value: Any) -> None:
        if ctx.get_parameter_source(p.name or "") not in (None, ParameterSource.DEFAULT):
            ctx.meta.setdefault(_DEPRECATED, []).append((dep, value))

    name = "deprecated_" + decls[0].lstrip("-").replace("-", "_")
    return click.option(*decls, name, cls=DeprecatedOption, deprecation=dep, expose_value=False, callback=record,
                        **kwargs)


def deprecations(cmd: click.Command) -> list[Deprecation]:
    """The old spellings a command still accepts."""
    return [p.deprecation for p in cmd.params if isinstance(p, DeprecatedOption)]


def _apply_deprecations(ctx: click.Context) -> None:
    root = ctx.find_root()
    tool = root.command.name or root.info_name or ""
    for dep, value in ctx.meta.pop(_DEPRECATED, []):
        assert dep.param is not None
        if ctx.get_parameter_source(dep.param) not in (None, ParameterSource.DEFAULT):
            raise click.UsageError(f"{dep.old} and {dep.new}: give one ({dep.old} is deprecated)", ctx)
        ctx.params[dep.param] = dep.convert(value) if dep.convert else value
        ctx.set_parameter_source(dep.param, ParameterSource.COMMANDLINE)
        click.echo(dep.message(tool), err=True)


class ToolCommand(click.Command):
    """A command whose old spellings (deprecated_option) are applied once its options are parsed."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        _apply_deprecations(ctx)
        return rest


class ToolGroup(click.Group):
    """ToolCommand's group: its own old spellings applied, its commands ToolCommands."""

    command_class = ToolCommand

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rest = super().parse_args(ctx, args)
        _apply_deprecations(ctx)
        return rest


# ---- options that belong to one mode --------------------------------------------------------------------

def given_options(ctx: click.Context, names: Sequence[str]) -> list[str]:
    """The options among parameter ``names`` given on the command line (or
    the environment), each as its longest flag."""
    out = []
    for p in ctx.command.params:
        if p.name in names and ctx.get_parameter_source(p.name) not in (None, ParameterSource.DEFAULT):
            out.append(max(p.opts, key=len))
    return out


def refuse_given(ctx: click.Context, names: Sequence[str], why: str) -> None:
    """A usage error naming the options among ``names`` that were given: they
    do not apply (``why``, e.g. "only with --drafter none")."""
    wrong = given_options(ctx, names)
    if wrong:
        raise click.UsageError(f"{', '.join(wrong)}: {why}", ctx)
