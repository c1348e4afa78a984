"""The subcommands of `gpu-share-webhook`, one module each.

Each module has `register(subparsers)`, which adds its parser and sets `func` to a callable
taking the parsed arguments and returning the exit code. Every option has an environment
variable, `GPU_SHARE_WEBHOOK_<NAME>`: its default is `from_env(name, fallback)`, which
`--help` shows as the variable and the fallback. This is the only way an option's variable is
read; a repeatable option (`action=Append`) reads a list, `separated` by a character.

A variable is read and checked only when its command runs (`Parser` resolves the defaults of
the command it parsed), so a bad value of one command's variable never disturbs another
command. A bad value is a usage error, like a bad option: exit 2 and one line that names the
variable, the value and what is expected. The same `ValueType` checks an option's value on
the command line (as its `type=`) and in its variable.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from webhook.errors import CertificateError
from webhook.policy import names, policies
from webhook.server import certificates

# Exit codes every command keeps to: 1 when a step fails (or, for `mutate`, something is
# refused), 2 for bad usage or input.
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
# As a shell reports a program a signal ended: Ctrl-C (SIGINT), and the reader of the output
# gone (SIGPIPE: `| head`; Python ignores SIGPIPE, its write fails instead).
EXIT_INTERRUPTED = 128 + 2
EXIT_BROKEN_PIPE = 128 + 13

# The names the rest of the project (deploy/, docs) agrees on.
DEFAULT_SERVICE = names.DEFAULT_SERVICE
DEFAULT_NAMESPACE = names.DEFAULT_NAMESPACE
DEFAULT_WEBHOOK_NAME = names.DEFAULT_WEBHOOK_NAME


def env_name(name: str) -> str:
    """The environment variable for an option: `cert-dir` -> `GPU_SHARE_WEBHOOK_CERT_DIR`."""
    return names.ENV_PREFIX + name.upper().replace("-", "_")


# --------------------------------------------------------------------------- value types


class InvalidValue(argparse.ArgumentTypeError):
    """A value an option does not take; `expected` says what it takes."""

    def __init__(self, value: str, expected: str) -> None:
        super().__init__(f"invalid value {value!r}: expected {expected}")
        self.value = value
        self.expected = expected


@dataclass(frozen=True, slots=True)
class ValueType:
    """What an option takes: an argparse `type=` that says what is expected when it fails.

    `parse` raises ValueError for a value it does not take.
    """

    expected: str
    parse: Callable[[str], Any]

    def __call__(self, raw: str) -> Any:
        try:
            return self.parse(raw)
        except ValueError:
            raise InvalidValue(raw, self.expected) from None


def _bounded(kind: str, minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"{kind} from {minimum:g} to {maximum:g}"
    if minimum is not None:
        return f"{kind}, at least {minimum:g}"
    if maximum is not None:
        return f"{kind}, at most {maximum:g}"
    return kind


def whole_number(minimum: int | None = None, maximum: int | None = None) -> ValueType:
    """A whole number, within the bounds given (inclusive)."""

    def parse(raw: str) -> int:
        value = int(raw.strip())
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise ValueError(raw)
        return value

    return ValueType(_bounded("a whole number", minimum, maximum), parse)


def number(minimum: float | None = None, *, positive: bool = False) -> ValueType:
    """A finite number: at least `minimum`, or above 0 when `positive`."""

    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not math.isfinite(value):
            raise ValueError(raw)
        if (minimum is not None and value < minimum) or (positive and value <= 0):
            raise ValueError(raw)
        return value

    if positive:
        return ValueType("a number above 0", parse)
    return ValueType(_bounded("a number", minimum, None), parse)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def _flag(raw: str) -> bool:
    word = raw.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(raw)


# A yes/no option's variable (unset or empty: no).
FLAG = ValueType("true or false (also 1/0, yes/no, on/off)", _flag)

_DNS1123_LABEL = re.compile(names.DNS1123_LABEL)
_DNS1035_LABEL = re.compile(names.DNS1035_LABEL)
_DNS1123_SUBDOMAIN = re.compile(names.DNS1123_SUBDOMAIN)
_LABEL_LENGTH = names.MAX_LABEL_LENGTH
_SUBDOMAIN_LENGTH = names.MAX_SUBDOMAIN_LENGTH


def _matching(pattern: re.Pattern[str], longest: int, *, empty: bool) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        if raw == "" and empty:
            return raw
        if len(raw) > longest or not pattern.fullmatch(raw):
            raise ValueError(raw)
        return raw

    return parse


_LABEL_RULE = f"lower-case letters, digits and '-', at most {_LABEL_LENGTH}"


def dns_label(what: str, *, empty: bool = False) -> ValueType:
    """A name that is a DNS-1123 label (`what` says whose, for the message); `empty` also
    takes "" (none given)."""
    return ValueType(
        f"{what} ({_LABEL_RULE}){' or empty' if empty else ''}",
        _matching(_DNS1123_LABEL, _LABEL_LENGTH, empty=empty),
    )


def namespace_name(*, empty: bool = False) -> ValueType:
    """A namespace name (a DNS-1123 label); `empty` also takes "" (none given)."""
    return dns_label("a namespace name", empty=empty)


# A Service name (a DNS-1035 label: it also starts with a letter).
SERVICE_NAME = ValueType(
    f"a Service name ({_LABEL_RULE}, starting with a letter)",
    _matching(_DNS1035_LABEL, _LABEL_LENGTH, empty=False),
)


def object_name(*, empty: bool = False) -> ValueType:
    """An object name (a DNS-1123 subdomain); `empty` also takes "" (none)."""
    return ValueType(
        f"an object name (lower-case letters, digits, '-' and '.', at most {_SUBDOMAIN_LENGTH})"
        + (" or empty" if empty else ""),
        _matching(_DNS1123_SUBDOMAIN, _SUBDOMAIN_LENGTH, empty=empty),
    )


def _namespaced_name(raw: str) -> str | None:
    if raw == "":
        return None
    namespace, sep, name = raw.partition("/")
    if not sep:
        raise ValueError(raw)
    _matching(_DNS1123_LABEL, _LABEL_LENGTH, empty=False)(namespace)
    _matching(_DNS1123_SUBDOMAIN, _SUBDOMAIN_LENGTH, empty=False)(name)
    return raw


# NAMESPACE/NAME of an object; "" is none.
OPTIONAL_NAMESPACED_NAME = ValueType(
    "NAMESPACE/NAME (a namespace name, '/', an object name)", _namespaced_name
)


def _text_or_none(raw: str) -> str | None:
    return raw or None


# A file, directory or name that may be left out: "" is none.
OPTIONAL_TEXT = ValueType("any text", _text_or_none)

# Any text, as it is (a file name).
TEXT = ValueType("any text", str)


def _san_name(raw: str) -> str:
    name = raw.strip()
    try:
        # The certificate's own check: a name taken here is one the certificate takes.
        certificates.subject_alt_names(
            service=names.DEFAULT_SERVICE, namespace=names.DEFAULT_NAMESPACE, extra_sans=[name]
        )
    except CertificateError:
        raise ValueError(raw) from None
    return name


# One more name for a serving certificate.
SAN_NAME = ValueType("a DNS name (a *. wildcard allowed) or an IP address", _san_name)


def separated(separator: str, item: ValueType) -> ValueType:
    """A list in one value (a repeatable option's variable): the parts between `separator`,
    without the blanks around them, blank ones left out, each checked by `item`."""

    def parse(raw: str) -> list[Any]:
        return [item.parse(part.strip()) for part in raw.split(separator) if part.strip()]

    return ValueType(f"{item.expected}, several separated by {separator!r}", parse)


# --------------------------------------------------------------------------- environment


@dataclass(frozen=True, slots=True)
class FromEnv:
    """An option's default, read from `variable` when its command runs (see `Parser`).

    Without the variable, `fallback`. The value is checked by `value_type`, else by the option's
    own `type=`, and against the option's `choices`. `--help` shows the fallback.
    """

    variable: str
    fallback: Any
    value_type: Callable[[str], Any] | None = None

    def __str__(self) -> str:
        return str(self.fallback)

    def resolve(self, action: argparse.Action | None) -> Any:
        """The value for `action`; `EnvironmentValueError` when the variable's is bad."""
        raw = os.environ.get(self.variable)
        if raw is None:
            return self.fallback
        convert = self.value_type
        if convert is None and action is not None and callable(action.type):
            convert = action.type
        value: Any = raw
        if convert is not None:
            try:
                value = convert(raw)
            except InvalidValue as exc:
                raise EnvironmentValueError(self, raw, exc.expected, action) from None
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                what = getattr(convert, "__name__", "a valid value")
                raise EnvironmentValueError(self, raw, what, action) from None
        choices = action.choices if action is not None else None
        if choices is not None and value not in choices:
            expected = "one of " + ", ".join(str(c) for c in choices)
            raise EnvironmentValueError(self, raw, expected, action)
        return value


class EnvironmentValueError(ValueError):
    """A bad value in an option's environment variable."""

    def __init__(
        self, source: FromEnv, raw: str, expected: str, action: argparse.Action | None
    ) -> None:
        option = "/".join(action.option_strings) if action and action.option_strings else ""
        if not option and action is not None and action.metavar:
            option = str(action.metavar)
        for_option = f" (for {option})" if option else ""
        super().__init__(f"{source.variable}={raw!r}{for_option}: expected {expected}")


def from_env(
    name: str, fallback: Any, value_type: Callable[[str], Any] | None = None
) -> FromEnv:
    """The default of an option whose variable is `env_name(name)`, read when it runs.

    `value_type` checks the variable's value when the option's own `type=` does not fit
    (a yes/no option has none; a repeatable one takes a list, `separated`).
    """
    return FromEnv(env_name(name), fallback, value_type)


class Append(argparse.Action):
    """`action="append"` for an option whose default is `from_env`: the values given replace
    the variable's list (argparse's own action would append to the default itself)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given = getattr(namespace, self.dest, None)
        setattr(namespace, self.dest, [*(given if isinstance(given, list) else []), values])


class Parser(argparse.ArgumentParser):
    """The parser of `gpu-share-webhook` and of each command (subparsers are of this class).

    It fills in the `FromEnv` defaults of the command it parsed, and reports an error (a bad
    option or a bad variable) in one line, exit 2.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The options whose default is `FromEnv`, by destination: what resolving one checks.
        self.from_env: dict[str, argparse.Action] = {}
        super().__init__(*args, **kwargs)

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if isinstance(action.default, FromEnv):
            self.from_env[action.dest] = action
        return action

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        for dest, given in list(vars(parsed).items()):
            value = given
            if isinstance(value, FromEnv):
                try:
                    value = value.resolve(self.from_env.get(dest))
                except EnvironmentValueError as exc:
                    self.error(str(exc))
            if isinstance(value, list):
                # Not the default's own list: a parser serves many parses (`cli.main`), and
                # a command may change what it is given.
                value = list(value)
            setattr(parsed, dest, value)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


# --------------------------------------------------------------------------- shared options


def help_text(
    text: str, option: str, default: str = "%(default)s", *, separator: str | None = None
) -> str:
    """An option's help with its environment variable and default; `separator` is the one
    between the values of a repeatable option's variable (`separated`)."""
    several = f", several separated by {separator!r}" if separator else ""
    return f"{text} (env {env_name(option)}{several}; default {default})"


def add_policies_argument(parser: argparse.ArgumentParser, help_first: str) -> None:
    """--policies DIR; read it with `policies_directory(args.policies)`."""
    parser.add_argument(
        "--policies",
        metavar="DIR",
        type=OPTIONAL_TEXT,
        default=from_env("policies", None),
        help=help_text(
            help_first,
            "policies",
            "./policies if it exists, else the policies shipped with the package",
        ),
    )


def add_workload_kinds_argument(parser: argparse.ArgumentParser) -> None:
    """--workload-kinds FILE; read it with `workload_kinds(args.workload_kinds)`."""
    parser.add_argument(
        "--workload-kinds",
        metavar="FILE",
        type=OPTIONAL_TEXT,
        default=from_env("workload-kinds", None),
        help=help_text(
            "workload kinds of other projects whose pod templates are reviewed"
            " (a WorkloadKinds file)",
            "workload-kinds",
            "the file shipped with the package: JobSet, LeaderWorkerSet, RayCluster, RayJob,"
            " RayService, PyTorchJob",
        ),
    )


def add_webhook_namespace_argument(parser: argparse.ArgumentParser) -> None:
    """--webhook-namespace NS for the commands that stand in for a cluster (`mutate`,
    `audit`): read from GPU_SHARE_WEBHOOK_NAMESPACE, as `serve` and `render` read theirs."""
    parser.add_argument(
        "--webhook-namespace",
        metavar="NS",
        type=namespace_name(),
        default=from_env("namespace", names.DEFAULT_NAMESPACE),
        help=help_text(
            "the namespace the webhook runs in: never sent to it, like kube-system", "namespace"
        ),
    )


def policies_directory(option: str | None) -> tuple[Path, str]:
    """The policy directory to use, and where it came from: the option, else `./policies`
    when there is one, else the policies shipped with the package."""
    if option:
        return Path(option), "--policies"
    local = Path("policies")
    if local.is_dir():
        return local, "./policies"
    return policies.embedded_directory(), "the policies shipped with the package"


def add_service_arguments(
    parser: argparse.ArgumentParser, *, service_help: str, namespace_help: str, san_help: str
) -> None:
    """--service, --namespace and --extra-san: the names a serving certificate is made for
    (`args.extra_san` is a list, empty when none are given).

    Each name, given as an option or in the variable, is checked when the command runs, by
    the certificate's own rule: a name it would not take is a usage error (exit 2), also
    where no certificate is made (`serve` with a pair in --cert-dir), so a typo shows at once.
    """
    parser.add_argument(
        "--service",
        type=SERVICE_NAME,
        default=from_env("service", DEFAULT_SERVICE),
        help=help_text(service_help, "service"),
    )
    parser.add_argument(
        "--namespace",
        type=namespace_name(),
        default=from_env("namespace", DEFAULT_NAMESPACE),
        help=help_text(namespace_help, "namespace"),
    )
    parser.add_argument(
        "--extra-san",
        action=Append,
        type=SAN_NAME,
        metavar="NAME",
        default=from_env("extra-san", [], separated(",", SAN_NAME)),
        help=help_text(f"{san_help}, repeatable", "extra-san", "none", separator=","),
    )


# --------------------------------------------------------------------------- YAML out


# go-yaml v2's resolve.go: its booleans beyond PyYAML's, and its numbers (strconv.ParseInt
# with base 0, underscores dropped; `yamlStyleFloat`).
_GO_YAML_NOT_STRINGS = re.compile(
    r"[yYnN]|[-+]?(0[bB][01_]+|0[oO][0-7_]+|0[xX][0-9a-fA-F_]+|[0-9][0-9_]*)"
    r"|[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    if _GO_YAML_NOT_STRINGS.fullmatch(value):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="'")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


try:
    # libyaml's emitter: PyYAML's own takes eight times as long (half a second for `render`).
    from yaml import CSafeDumper as _CSafeDumper
except ImportError:  # PyYAML built without libyaml
    _CSafeDumper = yaml.SafeDumper  # type: ignore[misc, assignment]


class KubeDumper(_CSafeDumper):
    """YAML that kubectl and Helm read as PyYAML does: multi-line strings in block style (the
    CEL expressions read as written), and in quotes the strings PyYAML writes plain but their
    reader (go-yaml v2, YAML 1.1, behind sigs.k8s.io/yaml) takes for something else: `y` and
    `n` are booleans to it, `0o17` and `1e3` numbers. A policy named `n` is a DNS label, and
    its namespace selector's value must stay a string; so is a label or an env value `y`."""


class _PureKubeDumper(yaml.SafeDumper):
    """`KubeDumper` with PyYAML's own emitter, which escapes what libyaml cannot write."""


KubeDumper.add_representer(str, _represent_str)  # type: ignore[arg-type]
_PureKubeDumper.add_representer(str, _represent_str)


def dump_yaml(objects: Sequence[Any], *, explicit_start: bool = True, width: int = 100) -> str:
    """Objects as YAML documents that kubectl and Helm read back as written (`KubeDumper`),
    keys in the order written."""
    options: dict[str, Any] = {
        "sort_keys": False,
        "default_flow_style": False,
        "explicit_start": explicit_start,
        "width": width,
    }
    try:
        text: str = yaml.dump_all(objects, Dumper=KubeDumper, **options)
    except UnicodeEncodeError:
        # A lone surrogate (a `\ud800` escape in the input): libyaml writes UTF-8 and cannot.
        text = yaml.dump_all(objects, Dumper=_PureKubeDumper, **options)
    return text
