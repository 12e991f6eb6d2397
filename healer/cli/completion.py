"""`healer completion bash|zsh|fish`: a shell completion script drawn from healer's own parser (its
commands, subcommands, flags and their choices), so that it never lists a flag healer does not take."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from healer.cli.common import Command
from healer.cli.parser import subparsers_of, walk

SHELLS = ("bash", "zsh", "fish")
EXAMPLES = (
    "source <(healer completion bash)                 (bash, this shell; needs the bash-completion package)",
    "healer completion bash > ~/.local/share/bash-completion/completions/healer   (bash, every new shell)",
    'healer completion zsh > "${fpath[1]}/_healer"     (zsh, then start a new shell; compinit must run)',
    "source <(healer completion zsh)                  (zsh, this shell, after compinit)",
    "healer completion fish > ~/.config/fish/completions/healer.fish   (fish, every new shell)",
)
# Flags whose value is a path: the shell completes file names there.
PATH_METAVARS = frozenset({"FILE", "DIR"})


def register(command: Command) -> None:
    completion = command(
        "completion",
        "print a shell completion script for bash, zsh or fish (drawn from healer's own commands and flags); "
        "the examples say how to install it",
        EXAMPLES,
        config=False,
    )
    completion.add_argument("shell", metavar="SHELL", choices=SHELLS, help="bash, zsh or fish")


@dataclass
class Node:
    """One (sub)command: what may follow it on the command line."""

    path: tuple[str, ...]
    subcommands: list[str] = field(default_factory=list)  # names and aliases
    flags: list[str] = field(default_factory=list)  # every option string but hidden ones
    valued: list[str] = field(default_factory=list)  # the flags that take a value
    choices: dict[str, list[str]] = field(default_factory=dict)  # flag -> its choices
    paths: list[str] = field(default_factory=list)  # flags whose value is a file or a folder
    words: list[str] = field(default_factory=list)  # the choices of its positional arguments

    @property
    def key(self) -> str:
        return " ".join(self.path)


def scenario_names() -> list[str]:
    """The drill catalog's names: what `healer drill SCENARIO` and `healer demo --drills` take."""
    from healer.core.drill_catalog import CATALOG

    return [scenario.name for scenario in CATALOG]


# Arguments whose values are names healer knows but argparse does not check (a bad one is refused by
# the command, naming the catalog): (command path, dest) -> the names.
NAMED_VALUES: dict[tuple[tuple[str, ...], str], Callable[[], list[str]]] = {
    (("drill",), "scenarios"): scenario_names,
    (("demo",), "drills"): scenario_names,
}


def nodes(parser: argparse.ArgumentParser) -> list[Node]:
    """Every (sub)command of the parser as a Node; an alias is a Node of its own with the same flags."""
    found = []
    for path, each in walk(parser):
        node = Node(path)
        sub = subparsers_of(each)
        if sub is not None:
            node.subcommands = list(sub.choices)
        for action in each._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            named = NAMED_VALUES.get((path, action.dest))
            if not action.option_strings:
                node.words += named() if named else [str(choice) for choice in action.choices or ()]
                continue
            if action.help == argparse.SUPPRESS:
                continue
            node.flags += action.option_strings
            if action.nargs == 0:
                continue
            node.valued += action.option_strings
            for flag in action.option_strings:
                if named is not None:
                    node.choices[flag] = named()
                elif action.choices is not None:
                    node.choices[flag] = [str(choice) for choice in action.choices]
                elif action.metavar in PATH_METAVARS:
                    node.paths.append(flag)
        found.append(node)
    return found


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Print the script for ``args.shell`` drawn from ``parser`` (healer's, as main built it)."""
    script = {"bash": bash, "zsh": zsh, "fish": fish}[args.shell](nodes(parser))
    sys.stdout.write(script)
    return 0


def _words(items: Iterable[str]) -> str:
    return shlex.quote(" ".join(items))


def _tables(tree: list[Node], indent: str = "    ") -> str:
    """The shell functions bash and zsh share: _healer_node PATH sets what may follow PATH;
    _healer_values PATH FLAG sets FLAG's choices (or _healer_path=1 for a file name)."""
    node_cases, value_cases = [], []
    for node in tree:
        node_cases.append(
            f'{indent}    "{node.key}")\n'
            f"{indent}        _healer_subs={_words(node.subcommands)}\n"
            f"{indent}        _healer_flags={_words(node.flags)}\n"
            f"{indent}        _healer_valued={shlex.quote(' ' + ' '.join(node.valued) + ' ')}\n"
            f"{indent}        _healer_words={_words(node.words)} ;;"
        )
        for flag, choices in node.choices.items():
            value_cases.append(f'{indent}    "{node.key}|{flag}") _healer_choices={_words(choices)} ;;')
        value_cases += [f'{indent}    "{node.key}|{flag}") _healer_path=1 ;;' for flag in node.paths]
    return (
        "_healer_node() {\n"
        f'{indent}_healer_subs=""; _healer_flags=""; _healer_valued=" "; _healer_words=""\n'
        f'{indent}case "$1" in\n' + "\n".join(node_cases) + f"\n{indent}esac\n}}\n\n"
        "_healer_values() {\n"
        f'{indent}_healer_choices=""; _healer_path=0\n'
        f'{indent}case "$1|$2" in\n' + "\n".join(value_cases) + f"\n{indent}esac\n}}\n"
    )


# The walk over the words typed so far, the same in bash and zsh: the (sub)command path, skipping each
# flag's value ("--flag value", "--flag=value", bash's "--flag = value").
_WALK = """\
    local word skip=0 candidate
    _healer_at=""
    _healer_node ""
    for word in "$@"; do
        if [[ "$word" == "=" ]]; then skip=1; continue; fi
        if ((skip)); then skip=0; continue; fi
        case "$word" in
            -*=*) continue ;;
            -*) [[ "$_healer_valued" == *" $word "* ]] && skip=1; continue ;;
        esac
        candidate="${_healer_at:+$_healer_at }$word"
        if [[ " $_healer_subs " == *" $word "* ]]; then
            _healer_at="$candidate"
            _healer_node "$_healer_at"
        fi
    done
"""


def bash(tree: list[Node]) -> str:
    return (
        "# bash completion for healer, printed by `healer completion bash` from healer's own parser.\n"
        "# Install: source <(healer completion bash), or write it to\n"
        "# ~/.local/share/bash-completion/completions/healer.\n\n"
        + _tables(tree)
        + "\n_healer_walk() {\n"
        + _WALK
        + "}\n\n"
        + """_healer() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" flag=""
    _healer_walk "${COMP_WORDS[@]:1:COMP_CWORD-1}"
    if [[ "$prev" == "=" && COMP_CWORD -ge 2 ]]; then
        flag="${COMP_WORDS[COMP_CWORD-2]}"
    elif [[ "$cur" == -*=* ]]; then
        flag="${cur%%=*}"; cur="${cur#*=}"
    elif [[ "$prev" == -* && "$_healer_valued" == *" $prev "* ]]; then
        flag="$prev"
    fi
    if [[ -n "$flag" ]]; then
        _healer_values "$_healer_at" "$flag"
        if [[ -n "$_healer_choices" ]]; then
            COMPREPLY=($(compgen -W "$_healer_choices" -- "$cur"))
        elif ((_healer_path)); then
            COMPREPLY=($(compgen -f -- "$cur"))
        else
            COMPREPLY=()
        fi
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$_healer_flags" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$_healer_subs $_healer_words" -- "$cur"))
    fi
    return 0
}

complete -F _healer healer
"""
    )


def zsh(tree: list[Node]) -> str:
    return (
        "#compdef healer\n"
        "# zsh completion for healer, printed by `healer completion zsh` from healer's own parser.\n"
        '# Install: healer completion zsh > "${fpath[1]}/_healer" (then a new shell), or\n'
        "# source <(healer completion zsh) after compinit.\n\n"
        + _tables(tree)
        + "\n_healer_walk() {\n"
        + _WALK
        + "}\n\n"
        + """_healer() {
    local cur="${words[CURRENT]}" prev="${words[CURRENT-1]}" flag=""
    _healer_walk "${(@)words[2,CURRENT-1]}"
    if [[ "$cur" == -*=* ]]; then
        flag="${cur%%=*}"
        compset -P '*='
    elif [[ "$prev" == -* && "$_healer_valued" == *" $prev "* ]]; then
        flag="$prev"
    fi
    if [[ -n "$flag" ]]; then
        _healer_values "$_healer_at" "$flag"
        if [[ -n "$_healer_choices" ]]; then
            compadd -- ${=_healer_choices}
        elif ((_healer_path)); then
            _files
        fi
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        compadd -- ${=_healer_flags}
    else
        compadd -- ${=_healer_subs} ${=_healer_words}
    fi
}

if [[ "${funcstack[1]}" == "_healer" ]]; then
    _healer "$@"
else
    compdef _healer healer
fi
"""
    )


def fish(tree: list[Node]) -> str:
    """fish's own `complete` lines, each under a condition on the command path typed so far."""
    lines = [
        "# fish completion for healer, printed by `healer completion fish` from healer's own parser.",
        "# Install: healer completion fish > ~/.config/fish/completions/healer.fish",
        "",
        "function __healer_at --description 'the healer (sub)command path typed so far'",
        "    set -l tokens (commandline -opc)",
        "    set -e tokens[1]",
        "    set -l at ''",
        "    set -l skip 0",
        "    for token in $tokens",
        "        if test $skip -eq 1",
        "            set skip 0",
        "            continue",
        "        end",
        "        switch $token",
        "            case '-*=*'",
        "                continue",
        "            case '-*'",
        "                contains -- $token (__healer_valued $at); and set skip 1",
        "                continue",
        "        end",
        '        contains -- $token (__healer_subs $at); and set at (string trim -- "$at $token")',
        "    end",
        "    echo $at",
        "end",
        "",
        "function __healer_is --description 'whether the path typed so far is this one'",
        "    set -l at (__healer_at)",
        '    test "$at" = "$argv"',
        "end",
        "",
        "function __healer_subs",
        '    switch "$argv"',
    ]
    lines += [
        f"        case {shlex.quote(n.key)}\n            echo {_words(n.subcommands)} | string split ' '" for n in tree
    ]
    lines += ["    end", "end", "", "function __healer_valued", '    switch "$argv"']
    lines += [
        f"        case {shlex.quote(n.key)}\n            echo {_words(n.valued)} | string split ' '" for n in tree
    ]
    lines += ["    end", "end", "", "complete -c healer -f"]
    for node in tree:
        when = f"-n {shlex.quote(f'__healer_is {shlex.quote(node.key)}')}"
        if node.subcommands or node.words:
            lines.append(f"complete -c healer {when} -a {_words([*node.subcommands, *node.words])}")
        for flag in node.flags:
            option = f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"
            value = ""
            if flag in node.choices:
                value = f" -x -a {_words(node.choices[flag])}"
            elif flag in node.paths:
                value = " -r -F"
            elif flag in node.valued:
                value = " -x"
            lines.append(f"complete -c healer {when} {option}{value}")
    return "\n".join(lines) + "\n"
