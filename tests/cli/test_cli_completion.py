"""kubectl's habits, the parser's side (issue 32, item 6): `healer completion bash|zsh|fish` drawn from the
real parser and checked in a real shell; "did you mean" for a misspelt command, flag or choice; each
command's help with its own options first and the shared ones in one short group at the end."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from healer.cli import _parser, main
from healer.cli.completion import SHELLS, nodes
from healer.cli.output import EXIT_CODES, EXIT_USAGE
from healer.cli.parser import SHARED_TITLE, walk


def script(capsys: pytest.CaptureFixture[str], shell: str, tmp_path: Path) -> Path:
    assert main(["completion", shell]) == 0
    path = tmp_path / f"healer.{shell}"
    path.write_text(capsys.readouterr().out)
    return path


def bash_completions(script_path: Path, *words: str) -> list[str]:
    """COMPREPLY after <TAB> on ``words`` (the last one is the word being completed), in a real bash."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f"source '{script_path}'\n"
        f"COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=()\n"
        "_healer\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.split()


@pytest.mark.subprocess
def test_the_bash_script_completes_commands_flags_and_choices_in_a_real_bash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = script(capsys, "bash", tmp_path)
    assert bash_completions(path, "healer", "sta") == ["status"]
    assert bash_completions(path, "healer", "st") == ["store", "status"]
    assert bash_completions(path, "healer", "status", "--out") == ["--output"]
    assert bash_completions(path, "healer", "status", "-o", "") == ["text", "wide", "json", "yaml"]
    assert bash_completions(path, "healer", "status", "--output", "=", "j") == ["json"]  # bash splits at "="
    assert bash_completions(path, "healer", "store", "l") == ["list", "ls"]
    assert bash_completions(path, "healer", "runs", "--config", "x.yaml", "g") == ["get"]  # a flag's value skipped
    assert bash_completions(path, "healer", "store", "ls", "-o", "") == ["json", "yaml", "wide", "name"]
    assert bash_completions(path, "healer", "completion", "") == list(SHELLS)
    assert "-A" in bash_completions(path, "healer", "status", "-")
    assert "--all" in bash_completions(path, "healer", "drill", "--a")  # the drill's own, not status'
    (tmp_path / "kube-prod.yaml").write_text("")
    assert bash_completions(path, "healer", "status", "--kubeconfig", str(tmp_path / "kube-")) == [
        str(tmp_path / "kube-prod.yaml")
    ]
    assert bash_completions(path, "healer", "promote", "--nope") == []
    assert bash_completions(path, "healer", "drill", "wrong-w") == ["wrong-weights"]  # the catalog's names
    assert "storm" in bash_completions(path, "healer", "demo", "--drills", "")


def test_every_flag_and_choice_of_the_parser_is_in_each_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Drawn from the parser: nothing healer takes is missing, nothing it does not take is there."""
    parser, _ = _parser()
    tree = {node.key: node for node in nodes(parser)}
    assert set(tree) == {" ".join(path) for path, _each in walk(parser)}
    for path, each in walk(parser):
        node = tree[" ".join(path)]
        for action in each._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                assert set(action.option_strings) <= set(node.flags), (path, action.option_strings)
        assert "--json" not in node.flags  # hidden: kept working, not offered
    texts = {shell: script(capsys, shell, tmp_path).read_text() for shell in SHELLS}
    for text in texts.values():
        for node in tree.values():
            for flag in node.flags:
                assert flag.lstrip("-") in text
            for choices in node.choices.values():
                assert all(choice in text for choice in choices)
    assert "complete -F _healer healer" in texts["bash"]
    assert texts["zsh"].startswith("#compdef healer\n")
    assert "complete -c healer -n '__healer_is status' -s o -x -a 'text wide json yaml'" in texts["fish"]


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here (bash is checked always)")
def test_the_fish_script_completes_in_a_real_fish(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = script(capsys, "fish", tmp_path)

    def complete(line: str) -> list[str]:
        done = subprocess.run(
            ["fish", "--no-config", "-c", f"source '{path}'; complete -C '{line}'"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return [row.split("\t")[0] for row in done.stdout.splitlines()]

    assert complete("healer sta") == ["status"]
    assert complete("healer status --out") == ["--output"]
    assert sorted(complete("healer status -o ")) == ["json", "text", "wide", "yaml"]
    assert complete("healer store l") == ["list", "ls"]


@pytest.mark.subprocess
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed here (bash is checked always)")
def test_the_zsh_script_offers_what_follows_the_typed_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """zsh's completion builtins only exist inside a completion widget: compadd is stood in for by a
    function that prints what it was given (zsh itself filters by the typed prefix)."""
    path = script(capsys, "zsh", tmp_path)

    def offered(*words: str) -> list[str]:
        program = (
            "compdef() { :; }; compset() { :; }; _files() { print -r -- '<files>'; }\n"
            'compadd() { [[ "$1" == "--" ]] && shift; print -rl -- "$@"; }\n'
            f"source '{path}'\n"
            f"words=({' '.join(repr(w) for w in words)}); CURRENT=${{#words}}; _healer\n"
        )
        done = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout.split()

    assert "status" in offered("healer", "sta") and "--output" not in offered("healer", "sta")
    assert "--output" in offered("healer", "status", "--out") and "--all" not in offered("healer", "status", "-")
    assert offered("healer", "status", "-o", "") == ["text", "wide", "json", "yaml"]
    assert offered("healer", "status", "--kubeconfig", "") == ["<files>"]


def test_completion_help_says_how_to_install_each_shell(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "--help"]) == 0
    out = capsys.readouterr().out
    assert "source <(healer completion bash)" in out
    assert "bash-completion/completions/healer" in out
    assert '"${fpath[1]}/_healer"' in out
    assert "~/.config/fish/completions/healer.fish" in out
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    assert "`healer completion --help` how to get tab completion" in top
    assert "130 ended by Ctrl-C (a watch, -w, ends so)" in top
    assert main(["completion", "tcsh"]) == EXIT_USAGE
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["stauts"], "healer: error: unknown command 'stauts'; did you mean 'status'?"),
        (["status", "--outptu", "json"], "healer status: error: unrecognized arguments: --outptu json; did you mean"),
        (["status", "-o", "jsn"], "healer status: error: argument -o/--output: invalid choice: 'jsn'; did you mean"),
        (["store", "lst"], "healer store: error: unknown subcommand 'lst'; did you mean 'list'?"),
        (
            ["runs", "--config", "x.yaml", "gte", "n"],
            "healer runs: error: unknown subcommand 'gte'; did you mean 'get'?",
        ),
        (["drill", "--tagret", "cluster"], "healer drill: error: unrecognized arguments: --tagret; did you mean"),
        (["probe", "--log-levle", "info"], "healer probe: error: unrecognized arguments: --log-levle info; did you"),
    ],
)
def test_a_misspelt_command_flag_or_choice_gets_one_line_with_the_closest(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(line), err
    assert err.count("\n") == 1  # one line: no usage block when the closest is named
    [expected] = re.findall(r"did you mean '([^']+)'\?", err)
    assert expected in {"status", "--output", "json", "list", "get", "--target", "--log-level"}


def test_what_is_close_to_nothing_lists_the_choices_with_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["xyzzy"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("usage: healer") and "did you mean" not in err
    assert "unknown command 'xyzzy'" in err and "status, check" in err


def test_each_help_lists_the_commands_own_options_first_and_the_shared_ones_last(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser, _ = _parser()
    for path, _each in walk(parser):
        if not path or len(path) > 2:
            continue
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        head, _, shared = out.partition(f"\n{SHARED_TITLE}:\n")
        assert shared, (path, "no shared group")
        shared_block = shared.split("\n\n")[0]
        # The shared group: -h, --config where the command reads healer.yaml, and logging, each short.
        assert shared_block.splitlines()[0].startswith("  -h, --help"), path
        assert "--log-level LEVEL" in shared_block and "-v, --verbose" in shared_block
        assert len(shared_block.splitlines()) <= 6, shared_block
        below_usage = head.partition("\n\n")[2]
        assert "--log-level" not in below_usage and "--help" not in below_usage, path
        options = head.split("\noptions:\n")[1] if "\noptions:\n" in head else ""
        if options:
            assert not options.lstrip().startswith(("-h", "--config", "--log-level")), (path, options[:80])
    assert main(["status", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.index("-w, --watch") < out.index("cluster options") < out.index(SHARED_TITLE)


def test_the_shared_options_work_before_and_after_a_nested_subcommand(tmp_path: Path) -> None:
    parser, _ = _parser()
    for argv in (
        ["runs", "--config", "a.yaml", "list", "-v"],
        ["runs", "list", "--config", "a.yaml", "--log-level", "info"],
        ["-v", "store", "ls", "--config", "a.yaml"],
    ):
        args = parser.parse_args(argv)
        assert args.config == "a.yaml", argv
        assert args.verbose or args.log_level, argv
    assert parser.parse_args(["runs", "--config", "a.yaml", "list"]).config == "a.yaml"  # not overwritten


def test_every_command_has_exit_codes_and_completion_is_one() -> None:
    assert "completion" in EXIT_CODES


@pytest.mark.subprocess
def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    healer = Path(sys.executable).parent / "healer"
    done = subprocess.run(
        ["bash", "-c", f"'{healer}' completion bash | true; exit ${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stderr == "" and done.returncode == 141  # 128 + SIGPIPE, as a shell tool that was cut off


def test_a_misspelt_drill_scenario_names_the_closest_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.conftest import EXAMPLE_CONFIG

    assert main(["drill", "--config", str(EXAMPLE_CONFIG), "wrong-wieghts"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "healer: drill: unknown scenario 'wrong-wieghts'; did you mean 'wrong-weights'? "
        "(`healer drill --list` shows the catalog)\n"
    )
    # The demo checks its --drills before it starts Triton (nothing is started here: no process allowed).
    assert main(["demo", "--config", str(EXAMPLE_CONFIG), "--drills", "stromm"]) == EXIT_USAGE
    assert "unknown scenario 'stromm'; did you mean 'storm'?" in capsys.readouterr().err
