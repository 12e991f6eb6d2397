"""repository_mode: per-pod end to end (issue 29 item 2): two real Tritons, each reading a repository of its
own (a pod's emptyDir, filled from the store as an init container fills it), the sidecar's real listener
beside each staging into that repository, the LocalEngine running the rollback's template with no live
repository of its own. Wrong weights, a bad config and a hang are healed on both; a pod restarted after
the heal (its repository copied again from the store, every version) serves the stable version; a stage
of a quarantined version is refused; running again changes nothing; a sidecar that does not answer fails
the rollback before anything that serves is touched."""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from healer.core.results import Status
from healer.edges.embedded import EmbeddedTriton
from healer.edges.store import pin_text
from healer.edges.triton import TritonHttp
from healer.engines.factory import local_engine
from healer.settings import ModelSettings, S3Settings, Settings, StoreSettings
from healer.sidecar.stage import STAGE_PATH
from healer.vocabulary import RollbackRequest
from probes.tiers import check_business
from tests.conftest import EXAMPLES
from tests.support.per_pod import (
    PodSidecar,
    S3Side,
    StoreSide,
    filesystem_side,
    per_pod_settings,
    record_stable,
    serve_pinned,
)
from tests.support.rollback_stack import SETUP_LOAD_TIMEOUT_S, AlertReceiver, relaxed_slo, serve_latest, write_model
from tests.support.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3, shared_seaweed

pytestmark = [pytest.mark.triton, pytest.mark.timeout(900)]

BASE = "linear_scorer"


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[tuple[EmbeddedTriton, Path]]]:
    """Two Tritons for the module, each on a repository of its own; each test loads its own model."""
    started: list[tuple[EmbeddedTriton, Path]] = []
    try:
        for name in ("pod-a", "pod-b"):
            repository = tmp_path_factory.mktemp(name)
            triton = EmbeddedTriton(repository, load_models=[], workdir=tmp_path_factory.mktemp(f"{name}-work"))
            triton.__enter__()
            started.append((triton, repository))
        yield started
    finally:
        for triton, _ in started:
            triton.__exit__(None, None, None)


@dataclass
class PerPod:
    model: str
    settings: Settings
    side: StoreSide
    tritons: list[TritonHttp]
    repositories: list[Path]
    sidecars: list[PodSidecar]
    alerts: AlertReceiver

    def request(self, incident: str) -> RollbackRequest:
        return RollbackRequest(
            model=self.model,
            from_version="2",
            incident=incident,
            reason="wrong-answer",
            detail="golden request failed",
            pod="pod-a",
        )

    def served(self) -> list[list[str]]:
        return [t.served_versions(self.model) for t in self.tritons]

    def listing(self) -> list[list[str]]:
        return [sorted(str(p.relative_to(r)) for p in (r / self.model).rglob("*")) for r in self.repositories]


_count = iter(range(1, 1000))


@pytest.fixture
def per_pod(pods: list[tuple[EmbeddedTriton, Path]], example_settings: Settings, tmp_path: Path) -> Iterator[object]:
    """A model whose v1 is stable and v2 (``broken``'s files, and ``config`` as the model's config file
    when given) is served on both pods, each pod's repository filled from the store beforehand."""
    made: list[PerPod] = []

    def make(
        broken: str,
        *,
        config: str | None = None,
        silent_sidecar: str = "",
        side: StoreSide | None = None,
        release: bool = False,
    ) -> PerPod:
        model = f"pp_{broken}_{next(_count)}"
        side = side or filesystem_side(tmp_path / "store")
        root, store, store_settings = side.root, side.store, side.settings
        write_model(root, BASE, model, {1: ("good", "1")})
        side.publish(model)
        tritons = [TritonHttp(triton.url, timeout_s=5.0) for triton, _ in pods]
        repositories = [repository for _, repository in pods]
        for repository in repositories:
            side.init_copy(model, repository)
        tritons[0].load_model(model, timeout_s=SETUP_LOAD_TIMEOUT_S)
        stable_config = tritons[0].model_config(model)
        record_stable(store, tritons[0], model, "1", (root / model / "config.pbtxt").read_text())
        # The push: v2 in the store (and a new config file), then on every pod as its init container
        # or a deploy puts it there, and served.
        source = EXAMPLES / ("broken" if broken != "stable" else "model_repository") / BASE / broken
        shutil.copytree(
            source if broken != "stable" else EXAMPLES / "model_repository" / BASE / "1", root / model / "2"
        )
        if config is not None:
            (root / model / "config.pbtxt").write_text(config.replace(f'name: "{BASE}"', f'name: "{model}"'))
        side.publish(model)
        for repository in [] if release else repositories:  # a release: v2 in the store only, v1 serving
            side.init_copy(model, repository)
        for triton in tritons:
            if release:
                serve_pinned(triton, model, stable_config, 1)
            elif config is not None:
                serve_latest(triton, model)  # the broken config file itself, as a deploy reads it
            else:
                serve_pinned(triton, model, stable_config, 2)
        assert [t.served_versions(model) for t in tritons] == [["1" if release else "2"]] * 2
        golden = relaxed_slo(example_settings).model(BASE).golden
        sidecars = [
            PodSidecar(example_settings_for(example_settings, model, golden), r, store_settings) for r in repositories
        ]
        alerts = AlertReceiver().__enter__()
        addresses = [sidecar.address for sidecar in sidecars]
        if silent_sidecar:
            addresses[0] = silent_sidecar
        settings = per_pod_settings(
            relaxed_slo(example_settings),
            ModelSettings(name=model, golden=golden),
            store=store_settings,
            replicas=[(t.url, a) for t, a in zip(tritons, addresses, strict=True)],
            state_dir=tmp_path / "runs",
            alert_url=alerts.url,
            # A silent sidecar never answers: every heal attempt waits this stage deadline out, to the same
            # failure at 1 s as at 4 s.
            load_timeout_s=1.0 if silent_sidecar else 60.0,
        )
        made.append(PerPod(model, settings, side, tritons, repositories, sidecars, alerts))
        return made[-1]

    yield make
    for stack in made:
        for triton in stack.tritons:
            try:
                triton.unload_model(stack.model)
            finally:
                triton.close()
        for sidecar in stack.sidecars:
            sidecar.stop()
        stack.alerts.__exit__(None, None, None)


def example_settings_for(base: Settings, model: str, golden: object) -> Settings:
    import dataclasses

    return dataclasses.replace(base, models=(ModelSettings(name=model, golden=golden),))  # type: ignore[arg-type]


def _heal(stack: PerPod, incident: str) -> dict[str, dict]:  # type: ignore[type-arg]
    status = local_engine(stack.settings).run(stack.request(incident), timeout_s=300)
    assert status.phase == "Succeeded", status
    assert status.outputs["to-version"] == "1"
    assert stack.served() == [["1"], ["1"]]
    golden = stack.settings.models[0].golden
    for triton in stack.tritons:
        assert check_business(triton, stack.model, "1", golden).status is Status.PASS
    return {p["name"]: p for p in json.loads(status.outputs["phases"])}


def _assert_each_pod_set_right(stack: PerPod, phases: dict[str, dict], incident: str) -> None:  # type: ignore[type-arg]
    restore = phases["restore"]["outputs"]
    assert restore["waves"] == [[stack.tritons[0].url], [stack.tritons[1].url]]  # the canary alone, then the other
    for triton, sidecar in zip(stack.tritons, stack.sidecars, strict=True):
        staged = restore["replicas"][triton.url]["stage"]
        assert staged["sidecar"] == sidecar.address and staged["verified"] in {"hashed", "stamp", "fetched"}
    ledger = stack.side.store.ledger(stack.model)
    assert ledger.is_quarantined("2") and "2" in stack.side.store.versions(stack.model)  # nothing deleted
    stable_config = ledger.stable_record("1").config_file  # type: ignore[union-attr]
    for repository in stack.repositories:
        assert not (repository / stack.model / "2").exists()  # out of Triton's sight in every pod
        assert (repository / stack.model / ".healer-quarantine" / f"2-{incident}").is_dir()  # moved, kept
        # Pinned to v1 as the store's copy is: the pod's Triton restarted (its emptyDir kept) loads v1 only.
        assert (repository / stack.model / "config.pbtxt").read_text() == pin_text(stable_config, "1")


def _restarted_pod_serves_the_stable_version(stack: PerPod) -> None:
    """A new pod: its init container copies the store again (every version, the quarantined one too)
    into an empty repository; its Triton loads the model from its files, with no override."""
    triton, repository = stack.tritons[1], stack.repositories[1]
    triton.unload_model(stack.model)
    stack.side.init_copy(stack.model, repository)
    assert (repository / stack.model / "2").is_dir()  # the quarantined version is back in the pod's folder
    serve_latest(triton, stack.model)
    assert triton.served_versions(stack.model) == ["1"]
    assert check_business(triton, stack.model, "1", stack.settings.models[0].golden).status is Status.PASS


@pytest.mark.parametrize("broken", ["wrong_weights", "hang"])
def test_a_broken_version_is_healed_in_each_pods_own_repository(per_pod, broken: str) -> None:  # type: ignore[no-untyped-def]
    stack: PerPod = per_pod(broken)
    incident = f"inc-{stack.model}".replace("_", "-")
    phases = _heal(stack, incident)
    _assert_each_pod_set_right(stack, phases, incident)
    assert phases["fetch-stable"]["outputs"]["verified"] == "by each replica's sidecar, before its load"

    # Staging the quarantined version is refused by every sidecar.
    for sidecar in stack.sidecars:
        code, answer = sidecar.post(STAGE_PATH, {"model": stack.model, "version": "2"})
        assert code == 409 and "quarantined" in answer["error"], answer

    # Running it again changes nothing: every replica already restored, no file moved or written.
    before = stack.listing()
    again = local_engine(stack.settings).run(stack.request(f"{incident}-again"), timeout_s=300)
    assert again.phase == "Succeeded", again
    assert stack.served() == [["1"], ["1"]] and stack.listing() == before

    _restarted_pod_serves_the_stable_version(stack)


def test_a_bad_config_is_healed_and_a_restarted_pod_reads_the_stable_config(per_pod) -> None:  # type: ignore[no-untyped-def]
    bad = (EXAMPLES / "broken" / BASE / "bad_config.pbtxt").read_text()
    stack: PerPod = per_pod("stable", config=bad)
    golden = stack.settings.models[0].golden
    assert check_business(stack.tritons[0], stack.model, "2", golden).status is not Status.PASS
    incident = f"inc-{stack.model}".replace("_", "-")
    phases = _heal(stack, incident)
    _assert_each_pod_set_right(stack, phases, incident)
    for repository in stack.repositories:
        assert "dims: [ 4 ]" in (repository / stack.model / "config.pbtxt").read_text()
    _restarted_pod_serves_the_stable_version(stack)


def test_a_sidecar_that_does_not_answer_fails_the_rollback_before_anything_serving_is_touched(per_pod) -> None:  # type: ignore[no-untyped-def]
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        stack: PerPod = per_pod("wrong_weights", silent_sidecar=f"127.0.0.1:{silent.getsockname()[1]}")
        before = stack.listing()
        status = local_engine(stack.settings).run(stack.request(f"inc-{stack.model}".replace("_", "-")), timeout_s=300)
    assert status.phase == "Failed", status
    assert "its Triton untouched" in status.message, status.message
    assert stack.served() == [["2"], ["2"]]  # the canary failed to stage: no replica was touched
    assert stack.listing() == before


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedS3]:
    with shared_seaweed() as server:
        yield server


def test_wrong_weights_are_healed_with_the_store_on_s3_and_a_restarted_pod_copies_the_pin(  # type: ignore[no-untyped-def]
    per_pod, seaweed: SeaweedS3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store on a real S3 (SeaweedFS): each sidecar fetches the stable version from the bucket into its
    own pod (every file's sha256 checked), and a new pod's storage initializer copies the pinned config."""
    import uuid

    for name, value in (("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY)):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket, prefix = seaweed.make_bucket(), f"per-pod-{uuid.uuid4().hex[:8]}"
    settings = StoreSettings(
        s3=S3Settings(bucket=bucket, prefix=prefix, endpoint_url=seaweed.endpoint_url, read_timeout_s=10.0)
    )
    side = S3Side(tmp_path / "files", seaweed.client(), bucket, prefix, settings)
    stack: PerPod = per_pod("wrong_weights", side=side)
    for repository in stack.repositories:  # the stable version is not in the pods: it must come from S3
        shutil.rmtree(repository / stack.model / "1")
    incident = f"inc-{stack.model}".replace("_", "-")
    phases = _heal(stack, incident)
    _assert_each_pod_set_right(stack, phases, incident)
    restore = phases["restore"]["outputs"]["replicas"]
    assert [restore[t.url]["stage"]["verified"] for t in stack.tritons] == ["fetched", "fetched"]
    _restarted_pod_serves_the_stable_version(stack)


def test_a_release_reaches_both_pods_each_staging_the_new_version_itself(per_pod) -> None:  # type: ignore[no-untyped-def]
    """A release rolls v2 out (not stable yet): each pod's sidecar stages it, its files checked against the
    canary's audit record, only while the release holds the model's lease; then a new pod loads v2."""
    import dataclasses

    from healer.engines.factory import local_release_engine
    from healer.vocabulary import ReleaseRequest

    stack: PerPod = per_pod("stable", release=True)
    assert all(not (r / stack.model / "2").exists() for r in stack.repositories)
    code, refused = stack.sidecars[0].post(STAGE_PATH, {"model": stack.model, "version": "2"})
    assert code == 409 and "nor the canary of the release" in refused["error"], refused  # no release holds it
    settings = dataclasses.replace(
        stack.settings, release=dataclasses.replace(stack.settings.release, bake_s=0.5, check_interval_s=0.1)
    )
    engine = local_release_engine(settings, state_dir=stack.repositories[0].parent / "releases")
    release = ReleaseRequest(model=stack.model, version="2", release=f"rel-{stack.model}".replace("_", "-"))
    status = engine.wait(engine.submit_release(release).name, timeout_s=300)
    assert status.phase == "Succeeded", status
    assert stack.served() == [["2"], ["2"]]
    assert all((r / stack.model / "2").is_dir() for r in stack.repositories)  # staged in each pod by its sidecar
    assert stack.side.store.ledger(stack.model).stable_record("2") is not None
    code, after = stack.sidecars[1].post(STAGE_PATH, {"model": stack.model, "version": "2"})
    assert (code, after["as"]) == (200, "stable"), after


def test_a_release_whose_canary_fails_is_put_back_and_set_aside_in_every_pod(per_pod) -> None:  # type: ignore[no-untyped-def]
    """The put-back of a per-pod release: the canary's pod staged v2 (wrong weights) for its load; after the
    golden check fails and v2 is quarantined, every pod's sidecar moves v2 out of Triton's sight and pins
    the config to v1, so a Triton restarted in a pod (its emptyDir kept) loads v1, never the canary."""
    from healer.engines.factory import local_release_engine
    from healer.vocabulary import ReleaseRequest

    stack: PerPod = per_pod("wrong_weights", release=True)
    engine = local_release_engine(stack.settings, state_dir=stack.repositories[0].parent / "releases")
    release_id = f"rel-{stack.model}".replace("_", "-")
    release = ReleaseRequest(model=stack.model, version="2", release=release_id)
    status = engine.wait(engine.submit_release(release).name, timeout_s=300)
    assert status.phase == "Failed", status
    assert stack.served() == [["1"], ["1"]]
    ledger = stack.side.store.ledger(stack.model)
    assert ledger.is_quarantined("2") and "2" in stack.side.store.versions(stack.model)  # nothing deleted
    stable_config = ledger.stable_record("1").config_file  # type: ignore[union-attr]
    assert (stack.repositories[0] / stack.model / ".healer-quarantine" / f"2-{release_id}").is_dir()  # the canary's
    for repository in stack.repositories:
        assert not (repository / stack.model / "2").exists()  # out of the pod's Triton's sight
        assert (repository / stack.model / "config.pbtxt").read_text() == pin_text(stable_config, "1")
    # The canary's pod restarted with its emptyDir as it is: its Triton reads its own files, no override.
    triton = stack.tritons[0]
    triton.unload_model(stack.model)
    serve_latest(triton, stack.model)
    assert triton.served_versions(stack.model) == ["1"]
