"""The rollback end to end on the embedded stack: real Triton, filesystem store, LocalEngine. Across
several replicas and restarts: test_rollback_replicas_triton.py."""

from __future__ import annotations

import json
from pathlib import Path

from healer.core.results import Status
from probes.tiers import check_business
from tests.support.rollback_stack import RollbackStack, engine_with


def test_broken_newest_version_is_rolled_back_to_the_last_stable(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        golden = stack.settings.models[0].golden
        assert check_business(stack.triton, stack.model, "3", golden).status is Status.FAIL
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        assert status.outputs["to-version"] == "2"
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert check_business(stack.triton, stack.model, "2", golden).status is Status.PASS
        ledger = stack.store.ledger(stack.model)
        assert ledger.is_quarantined("3")
        # The store keeps every version; the live repository no longer offers the quarantined one.
        assert (stack.store.blobs.root / stack.model / "3" / "params.json").exists()  # type: ignore[attr-defined]
        assert not (stack.live / stack.model / "3").exists()
        phases = json.loads(status.outputs["phases"])
        assert [p["name"] for p in phases] == ["lease", "fetch-stable", "restore", "record"]
        [replica] = phases[2]["outputs"]["replicas"].values()
        assert replica["action"] == "swap" and replica["served_before"] == ["3"]
        assert stack.alerts.alerts == []


def test_a_tampered_staged_stable_version_is_never_loaded(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    """v2 was staged and stamped when promoted; then its weights in the live repository were
    overwritten (same size, mtime put back). The rollback's quick check sees the change, reads the copy
    in full, refuses it and fetches v2 from the store again: Triton only ever loads the ledger's bytes."""
    import os

    from healer.edges.store import DISPLACED_DIR

    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        golden = stack.settings.models[0].golden
        staged = stack.live / stack.model / "2" / "params.json"
        before = staged.stat()
        text = staged.read_text()
        assert "0.50002" in text
        staged.write_text(text.replace("0.50002", "9.50002"))
        os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        phases = {p["name"]: p for p in json.loads(status.outputs["phases"])}
        assert phases["fetch-stable"]["outputs"]["verified"] == "fetched"
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert check_business(stack.triton, stack.model, "2", golden).status is Status.PASS
        [aside] = (stack.live / stack.model / DISPLACED_DIR).iterdir()
        assert "9.50002" in (aside / "params.json").read_text()  # kept for diagnosis, never deleted


def test_stable_version_also_broken_escalates_within_budget_and_deletes_nothing(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "nan")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        # v2 was promoted while good; then someone overwrote its weights in place in both places.
        for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
            broken = Path(root) / stack.model / "2" / "params.json"
            broken.write_text(broken.read_text().replace("0.50002", "-9.0"))
        # Ledger hashes no longer match the store: refused before loading anything.
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Failed"
        assert stack.triton.served_versions(stack.model) == ["3"]  # still loaded: broken, but answering
        assert "fetch-stable" in status.message and "files differ from the stable ledger" in status.message
        assert "params.json" in status.message
        record = stack.engine.get(status.name)
        started, finished = record["status"]["startedAt"], record["status"]["finishedAt"]
        assert started and finished
        [alert] = stack.alerts.alerts
        assert alert["labels"]["alertname"] == "HealerRollbackEscalated"
        assert alert["labels"]["model"] == stack.model and alert["labels"]["pod"] == "triton-0"
        assert "files differ from the stable ledger" in alert["annotations"]["description"]
        assert alert["annotations"]["runbook_url"].endswith("rollback-escalated.md")
        # Nothing deleted: every version directory is still in the store and the live repository.
        for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
            assert sorted(p.name for p in (Path(root) / stack.model).iterdir() if p.name.isdigit()) == ["1", "2", "3"]
        assert stack.store.ledger(stack.model).is_quarantined("3")
        exit_node = [n for n in record["status"]["nodes"].values() if n["displayName"] == "escalate"]
        assert exit_node and exit_node[0]["phase"] == "Succeeded"


def test_stable_version_that_answers_wrongly_fails_verify_and_escalates(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights"), 3: ("broken", "nan")}, stable=[1]
    ) as stack:
        stack: RollbackStack
        # A bad ledger entry: v2 recorded stable by hand (as a careless operator could), with true hashes.
        from healer.core.ledger import StableRecord

        v1 = stack.store.ledger(stack.model).stable_record("1")
        assert v1 is not None
        fake = StableRecord("2", stack.store.version_files(stack.model, "2"), "t", "hand", v1.config)
        stack.store.update_ledger(stack.model, lambda ledger: ledger.with_stable(fake))
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Failed"
        assert status.message.startswith("restore: ")
        assert "expected 7.1 got 12.1" in status.message
        [alert] = stack.alerts.alerts
        assert "verify" in alert["annotations"]["description"]


def test_running_the_same_rollback_twice_is_harmless(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory("tiny_classifier", {1: ("good", "1"), 2: ("broken", "raises")}, stable=[1]) as stack:
        stack: RollbackStack
        first = stack.engine.run(stack.request("2", incident="inc-a"), timeout_s=120)
        assert first.phase == "Succeeded" and first.outputs["to-version"] == "1"
        # Same incident: joins the finished run, starts nothing.
        again = stack.engine.submit(stack.request("2", incident="inc-a"))
        assert again.created is False and again.name == first.name
        # A new incident for the same broken version, served nowhere now: nothing to do (0b03a4e), nothing
        # staged, loaded, recorded or quarantined again; the run succeeds.
        second = stack.engine.run(stack.request("2", incident="inc-b"), timeout_s=120)
        assert second.phase == "Succeeded", second
        assert stack.triton.served_versions(stack.model) == ["1"]
        assert [p["name"] for p in json.loads(second.outputs["phases"])] == ["lease"], second.outputs
        ledger = stack.store.ledger(stack.model)
        assert [q.incident for q in ledger.quarantined] == ["inc-a"]
        assert len(stack.engine.list_runs()) == 2


def test_filesystem_store_that_is_not_mounted_escalates(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1], deadline_s=15
    ) as stack:
        stack: RollbackStack
        root = stack.store.blobs.root  # type: ignore[attr-defined]
        root.rename(root.with_name("store-unmounted"))
        try:
            status = stack.engine.run(stack.request("2"), timeout_s=60)
        finally:
            root.with_name("store-unmounted").rename(root)
        assert status.phase == "Failed"
        assert "not mounted" in status.message
        assert stack.triton.served_versions(stack.model) == ["2"]  # the served model stays loaded
        [alert] = stack.alerts.alerts
        assert "not mounted" in alert["annotations"]["description"]
        record = stack.engine.get(status.name)
        pods = [n for n in record["status"]["nodes"].values() if n["type"] == "Pod" and n["templateName"] == "heal"]
        assert len(pods) == 3  # transient: the first try and two retries, then escalation


def test_deadline_stops_the_rollback_and_escalates(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    # Triton's Python backend takes ~1.4 s to load: a 1 s budget cannot be met.
    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1], deadline_s=1
    ) as stack:
        stack: RollbackStack
        import time

        started = time.monotonic()
        status = stack.engine.run(stack.request("2"), timeout_s=60)
        elapsed = time.monotonic() - started
        assert status.phase == "Failed"
        assert status.message == "Step exceeded its deadline"
        assert elapsed < 1 + 5  # the deadline, plus the escalation and the stopped step's last poll
        [alert] = stack.alerts.alerts
        assert "Step exceeded its deadline" in alert["annotations"]["description"]
        # The step noticed the deadline and stopped: it never recorded a restore. Whether the swap it
        # was in finished or not, the model is loaded (the swap never leaves it absent).
        record = stack.engine.get(status.name)
        phases = json.loads(
            next(
                p["value"]
                for n in record["status"]["nodes"].values()
                if n["type"] == "Pod" and n["templateName"] == "heal"
                for p in n["outputs"]["parameters"]
                if p["name"] == "phases"
            )
        )
        assert phases and phases[0]["name"] == "lease"  # the step reported what it got through
        assert "record" not in [p["name"] for p in phases]
        served = stack.triton.served_versions(stack.model)
        assert served in (["1"], ["2"], ["1", "2"]), served


# ---- restore or change nothing ---------------------------------------------------------------------------


def test_no_stable_version_leaves_the_served_model_loaded_and_escalates(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[]) as stack:
        stack: RollbackStack
        assert stack.triton.served_versions(stack.model) == ["2"]
        status = stack.engine.run(stack.request("2"), timeout_s=120)
        assert status.phase == "Failed"
        assert "ever promoted stable" in status.message
        # Before, the model was loaded (wrong, but answering); after, it still is: nothing got worse.
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert stack.triton.model_version_ready(stack.model, "2")
        [alert] = stack.alerts.alerts
        assert "ever promoted stable" in alert["annotations"]["description"]
        assert (stack.live / stack.model / "2").is_dir()  # escalation records; it moves nothing


def test_a_failed_swap_keeps_the_old_version_serving(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Triton's reload keeps the loaded version when the new one fails to load: nothing is absent."""
    from healer.core.ledger import StableRecord

    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "nan")}, stable=[1]) as stack:
        stack: RollbackStack
        v1 = stack.store.ledger(stack.model).stable_record("1")
        assert v1 is not None
        # A config Triton cannot load (no such backend), recorded as v1's: the load of v1 must fail.
        bad = StableRecord("1", v1.files, v1.promoted_at, v1.promoted_by, {**v1.config, "backend": "no_such_backend"})
        stack.store.update_ledger(stack.model, lambda ledger: ledger.with_stable(bad))
        for order in ("swap", "unload-first"):
            engine = engine_with(stack, tmp_path, order=order)
            status = engine.run(stack.request("2", incident=f"inc-{order}"), timeout_s=120)
            assert status.phase == "Failed", (order, status)
            assert "Triton refused" in status.message, (order, status.message)
            # Either way the broken-but-answering version is loaded again afterwards, never absent.
            assert stack.triton.served_versions(stack.model) == ["2"], order
            if order == "unload-first":
                assert "v2 loaded again" in status.message


def test_unload_first_order_restores_too(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with fs_stack_factory("tiny_classifier", {1: ("good", "1"), 2: ("broken", "raises")}, stable=[1]) as stack:
        stack: RollbackStack
        engine = engine_with(stack, tmp_path, order="unload-first")
        status = engine.run(stack.request("2"), timeout_s=120)
        assert status.phase == "Succeeded", status
        assert stack.triton.served_versions(stack.model) == ["1"]
        restore = {p["name"]: p for p in json.loads(status.outputs["phases"])}["restore"]["outputs"]
        assert restore["order"] == "unload-first"
        [replica] = restore["replicas"].values()
        assert replica["action"] == "swap" and replica["unload"]["already"] is False


def test_two_engines_never_heal_one_model_at_once(fs_stack_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """An Argo workflow and a pod's in-pod fallback have different locks (Argo's mutex, a file in
    the pod); the store lease is what both see. Two engines with separate lock folders stand for
    them here: the second run waits for the lease, then finds the model already restored."""
    from healer.engines.local import LocalEngine
    from workflows.rollback import build_rollback_template
    from workflows.steps.context import context_from_settings

    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        engines = [
            LocalEngine(build_rollback_template(), lambda: context_from_settings(stack.settings), tmp_path / f"pod-{n}")
            for n in (1, 2)
        ]
        submissions = [engine.submit(stack.request("2", incident=f"inc-race-{n}")) for n, engine in enumerate(engines)]
        statuses = [e.wait(s.name, timeout_s=120) for e, s in zip(engines, submissions, strict=True)]
        assert [s.phase for s in statuses] == ["Succeeded", "Succeeded"], statuses
        phases = [{p["name"]: p for p in json.loads(s.outputs["phases"])} for s in statuses]
        touched = sorted(p["restore"]["outputs"]["touched"] for p in phases)
        assert touched == [0, 1]  # one swapped, the other found it already restored
        # The lease spans the whole restore: the runs' restore phases never overlap.
        spans = sorted((p["restore"]["started_at"], p["restore"]["finished_at"]) for p in phases)
        assert spans[0][1] <= spans[1][0], spans
        assert stack.triton.served_versions(stack.model) == ["1"]


def test_an_unquarantined_version_can_be_promoted_again(fs_stack_factory, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A false alarm: v2 was good but rolled back. A person lifts the quarantine and promotes it."""
    import yaml

    from healer.cli import main
    from tests.conftest import EXAMPLES
    from tests.support.rollback_stack import serve_versions

    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1]) as stack:
        stack: RollbackStack
        assert stack.triton.served_versions(stack.model) == ["2"]
        status = stack.engine.run(stack.request("2"), timeout_s=120)
        assert status.phase == "Succeeded", status
        assert not (stack.live / stack.model / "2").exists()

        document = yaml.safe_load((EXAMPLES / "healer.yaml").read_text())
        document.pop("embedded")
        document["models"] = [{**document["models"][0], "name": stack.model}]
        document["triton"]["url"] = stack.settings.triton.url
        document["store"] = {"filesystem": {"root": str(stack.store.blobs.root)}}  # type: ignore[attr-defined]
        document["live_repository"] = str(stack.live)
        config = tmp_path / "healer.yaml"
        config.write_text(yaml.safe_dump(document))
        promote = ["promote", "--config", str(config), stack.model, "2", "--by", "alice"]

        assert main(promote) != 0
        assert "quarantined" in capsys.readouterr().err
        reason = "false alarm: the golden values were stale"
        assert main(["store", "--config", str(config), "unquarantine", stack.model, "2", "--reason", reason]) == 0
        assert (stack.live / stack.model / "2").is_dir()  # moved back where Triton reads it
        ledger = stack.store.ledger(stack.model)
        assert not ledger.is_quarantined("2")
        assert [lift.version for lift in ledger.lifted] == ["2"]
        assert any(a["event"] == "unquarantined" and a["reason"] == reason for a in stack.store.audit(stack.model))

        serve_versions(stack.triton, stack.model, [2])
        capsys.readouterr()
        assert main(promote) == 0, capsys.readouterr().err
        assert stack.store.ledger(stack.model).stable_record("2") is not None


def test_a_held_lease_keeps_a_rollback_from_touching_triton_until_it_is_released(  # type: ignore[no-untyped-def]
    fs_stack_factory,
) -> None:
    """Another engine (say an Argo workflow) holds the model's lease: this rollback waits in its lease
    phase, Triton untouched, and goes on once the lease is released."""
    import time

    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("broken", "wrong_weights")}, stable=[1]) as stack:
        stack: RollbackStack
        other = stack.store.acquire_lease(stack.model, "healer-rollback-elsewhere/argo-pod/1", ttl_s=120)
        submission = stack.engine.submit(stack.request("2"))
        time.sleep(2.0)  # longer than a swap takes here (about 1.5 s)
        assert stack.engine.status(submission.name).phase == "Running"
        assert stack.triton.served_versions(stack.model) == ["2"]  # untouched while the lease is held
        stack.store.release_lease(other)
        status = stack.engine.wait(submission.name, timeout_s=120)
        assert status.phase == "Succeeded", status
        lease = {p["name"]: p for p in json.loads(status.outputs["phases"])}["lease"]["outputs"]
        assert lease["waited_s"] >= 2.0
        assert stack.triton.served_versions(stack.model) == ["1"]


# ---- issue 15: a healed bad config stays healed; an escalation never quarantines a stable version ------------


def _push_with_config(stack: RollbackStack, version: int, files_of: int, config: Path) -> None:
    """A new version (a copy of ``files_of``'s files) with a model-level config.pbtxt that loads
    but refuses every request (5 inputs instead of 4), served from disk as a plain push would be."""
    import shutil

    from tests.support.rollback_stack import serve_latest

    text = config.read_text().replace('name: "linear_scorer"', f'name: "{stack.model}"')
    for root in (stack.live, stack.store.blobs.root):  # type: ignore[attr-defined]
        shutil.copytree(Path(root) / stack.model / str(files_of), Path(root) / stack.model / str(version))
        (Path(root) / stack.model / "config.pbtxt").write_text(text)
    serve_latest(stack.triton, stack.model)


def test_a_healed_bad_config_serves_the_stable_version_after_a_restart(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    """Issue 15, 1: the rollback restores the stable version's config.pbtxt too, so a restarted or new
    replica (which loads from the file, without the rollback's override) serves it correctly."""
    from tests.conftest import EXAMPLES
    from tests.support.rollback_stack import serve_latest

    with fs_stack_factory("linear_scorer", {1: ("good", "1"), 2: ("good", "2")}, stable=[1, 2]) as stack:
        stack: RollbackStack
        golden = stack.settings.models[0].golden
        _push_with_config(stack, 3, 2, EXAMPLES / "broken" / "linear_scorer" / "bad_config.pbtxt")
        broken = check_business(stack.triton, stack.model, "3", golden)
        assert broken.status is Status.FAIL and "400" in broken.reason, broken
        status = stack.engine.run(stack.request("3"), timeout_s=120)
        assert status.phase == "Succeeded", status
        config = (stack.live / stack.model / "config.pbtxt").read_text()
        assert config == stack.store.ledger(stack.model).stable_record("2").config_file  # type: ignore[union-attr]
        assert "dims: [ 4 ]" in config and "dims: [ 5 ]" not in config
        [displaced] = (stack.live / stack.model / ".healer-displaced").glob("config.pbtxt-*")
        assert "dims: [ 5 ]" in displaced.read_text()  # the broken file is kept, never deleted
        # A restart: Triton loads the model from its files, with no override.
        serve_latest(stack.triton, stack.model)
        assert stack.triton.served_versions(stack.model) == ["2"]
        assert check_business(stack.triton, stack.model, "2", golden).status is Status.PASS  # no second incident
        # Running the same rollback again changes nothing, the file included.
        again = stack.engine.run(stack.request("3", incident="inc-again"), timeout_s=120)
        assert again.phase == "Succeeded", again
        assert (stack.live / stack.model / "config.pbtxt").read_text() == config
        assert len(list((stack.live / stack.model / ".healer-displaced").glob("config.pbtxt-*"))) == 1


def test_an_escalation_never_quarantines_the_only_stable_version(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    """Issue 15, 1: the stable version fails because of something around it (here its config): the
    escalation alerts and keeps the pod, but the ledger keeps it stable and restorable."""
    from tests.conftest import EXAMPLES

    with fs_stack_factory("linear_scorer", {2: ("good", "2")}, stable=[2]) as stack:
        stack: RollbackStack
        text = (EXAMPLES / "broken" / "linear_scorer" / "bad_config.pbtxt").read_text()
        (stack.live / stack.model / "config.pbtxt").write_text(text.replace("linear_scorer", stack.model))
        from tests.support.rollback_stack import serve_latest

        serve_latest(stack.triton, stack.model)
        status = stack.engine.run(stack.request("2"), timeout_s=120)
        assert status.phase == "Failed", status
        [alert] = stack.alerts.alerts
        assert alert["labels"]["alertname"] == "HealerRollbackEscalated"
        ledger = stack.store.ledger(stack.model)
        assert not ledger.is_quarantined("2")
        assert ledger.stable_record("2") is not None
        [audit] = [a for a in stack.store.audit(stack.model) if a["event"] == "escalated"]
        assert "stable in the ledger" in audit["not_quarantined"]


def test_a_retry_after_a_store_blip_takes_its_own_attempts_lease_over_at_once(fs_stack_factory) -> None:  # type: ignore[no-untyped-def]
    """Issue 15, 3: attempt 0 took the lease and the store went away before it could release it; the
    retry of the same run must not wait on its own predecessor's lease until the deadline."""
    import time

    from healer.engines.local import in_pod_run
    from healer.vocabulary import workflow_name

    with fs_stack_factory(
        "linear_scorer", {1: ("good", "1"), 2: ("good", "2"), 3: ("broken", "wrong_weights")}, stable=[1, 2]
    ) as stack:
        stack: RollbackStack
        request = stack.request("3")
        run = in_pod_run(workflow_name(request))  # the LocalEngine's run, in this pod
        # What attempt 0 left: its lease, unexpired and never released (the store was down for the release).
        stack.store.acquire_lease(
            stack.model, f"{request.incident}/{run}/pod/0", 30, incident=request.incident, run=run
        )
        started = time.monotonic()
        status = stack.engine.run(request, timeout_s=120)
        assert status.phase == "Succeeded", status
        [lease_phase] = [p for p in json.loads(status.outputs["phases"]) if p["name"] == "lease"]
        assert lease_phase["outputs"]["waited_s"] < 2.0
        assert lease_phase["outputs"]["taken_over_from"] == f"{request.incident}/{run}/pod/0"
        assert time.monotonic() - started < 30  # not the lease's TTL, let alone the deadline
        assert stack.triton.served_versions(stack.model) == ["2"]
