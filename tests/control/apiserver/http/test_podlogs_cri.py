"""kubelet's reading of a CRI log file (:mod:`control.apiserver.crilog`) and
kube-apiserver's/kubelet's checks of a pods/log request
(:mod:`control.apiserver.http.podlogs`), on files and pods written here: records and
their errors (file and line named), partial lines joined, ``tailLines`` counting file
lines, ``since`` per record, ``timestamps`` once per line in Go's RFC3339Nano,
``limitBytes`` cutting inside a line, the follow reader waiting for a line's end, the
query's decoding (400) and validation (422), the container chosen, and kubelet's
refusals from the container statuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from control.apiserver import crilog
from control.apiserver.http import podlogs
from control.apiserver.http.status import APIError
from netmodel.objects import Pod

T0 = "2026-11-29T12:00:00.100000000Z"
NS = 1_000_000_000
T0_NS = crilog.parse_rfc3339(T0)

LOG = (
    f"{T0} stdout F first\n"
    "2026-11-29T12:00:01.000000000Z stdout P one half \n"  # a partial line (P)
    "2026-11-29T12:00:02.000000000Z stdout F other half\n"
    "2026-11-29T12:00:03.250000000Z stderr F last\n"
)


def test_rfc3339_both_ways() -> None:
    assert T0_NS == 1795953600 * NS + 100_000_000
    assert crilog.format_rfc3339nano(T0_NS) == "2026-11-29T12:00:00.1Z"  # zeros dropped
    assert crilog.format_rfc3339nano(1795953600 * NS) == "2026-11-29T12:00:00Z"
    assert crilog.parse_rfc3339("2026-11-29T14:00:00.1+02:00") == T0_NS
    assert crilog.parse_rfc3339("2026-11-29T12:00:00.987Z", fraction=False) == 1795953600 * NS
    for bad in ("2026-11-29 12:00:00Z", "2026-02-30T00:00:00Z", "2026-11-29T12:00:00"):
        with pytest.raises(ValueError):
            crilog.parse_rfc3339(bad)


def test_records_and_malformed_lines_named_by_file_and_line() -> None:
    r = crilog.parse_record(f"{T0} stdout F a b  c".encode())
    assert r == crilog.Record(T0_NS, "stdout", False, b"a b  c")
    assert crilog.parse_record(f"{T0} stderr P ".encode()).partial
    data = (LOG + "garbage\n" + f"{T0} stdin F x\n" + f"{T0} stdout X y\n").encode()
    errors: list[str] = []
    recs = crilog.parse_records(data, "0.log", errors=errors)
    assert [r.text for r in recs] == [b"first", b"one half ", b"other half", b"last"]
    assert errors == [
        "0.log:5: not a CRI log record (want 'TIME STREAM F|P TEXT')",
        "0.log:6: unknown stream b'stdin' (stdout or stderr)",
        "0.log:7: unknown tag b'X' (F or P)",
    ]
    # an unfinished last line is not a record yet
    assert len(crilog.parse_records(LOG.encode() + f"{T0} stdout F no end".encode())) == 4


def test_render_joins_partials_stamps_each_line_once_and_cuts() -> None:
    recs = crilog.parse_records(LOG.encode())
    assert crilog.render(recs) == b"first\none half other half\nlast\n"
    assert crilog.render(recs, timestamps=True) == (
        b"2026-11-29T12:00:00.1Z first\n"
        b"2026-11-29T12:00:01Z one half other half\n"
        b"2026-11-29T12:00:03.25Z last\n"
    )
    # since: a record older than it is skipped (per record, as kubelet does)
    assert (
        crilog.render(recs, since_ns=crilog.parse_rfc3339("2026-11-29T12:00:02Z"))
        == b"other half\nlast\n"
    )
    assert crilog.render(recs, limit=9) == b"first\none"
    # tailLines counts the file's lines, not the joined ones
    assert crilog.render(crilog.tail(recs, 2)) == b"other half\nlast\n"
    assert crilog.render(crilog.tail(recs, 0)) == b""
    assert crilog.tail(recs, 10) == recs


def test_renderer_across_calls_keeps_the_line_and_the_limit() -> None:
    recs = crilog.parse_records(LOG.encode())
    r = crilog.Renderer(timestamps=True, limit=60)
    out = r.feed(recs[:2]) + r.feed(recs[2:])
    assert out == (b"2026-11-29T12:00:00.1Z first\n2026-11-29T12:00:01Z one half other half\n")[:60]
    assert r.exhausted and r.feed(recs) == b""


def test_reader_follows_a_growing_file(tmp_path: Path) -> None:
    path = tmp_path / "0.log"
    reader = podlogs._Reader(path)
    assert reader.read() == []  # no file yet
    path.write_bytes(f"{T0} stdout F one\n{T0} stdout F tw".encode())
    assert [r.text for r in reader.read()] == [b"one"]
    assert reader.read() == []  # the second line has no end yet
    with path.open("ab") as f:
        f.write(f"o\nbad line\n{T0} stdout F three\n".encode())
    assert [r.text for r in reader.read()] == [b"two", b"three"]
    assert reader.line == 5


def q(**kw: str) -> dict[str, list[str]]:
    return {k: [v] for k, v in kw.items()}


def refused(params: dict[str, list[str]]) -> APIError:
    with pytest.raises(APIError) as e:
        podlogs.log_options(params, "web-0")
    return e.value


def test_query_decoding_as_kube_apiserver() -> None:
    o = podlogs.log_options(
        q(
            follow="",
            timestamps="TRUE",
            previous="0",
            tailLines="+3",
            sinceTime="2026-11-29T12:00:00.9Z",
        ),
        "web-0",
    )
    assert (o.follow, o.timestamps, o.previous, o.tail_lines) == (True, True, False, 3)
    assert o.since_time_ns == 1795953600 * NS  # kubelet gets it to the second
    assert podlogs.log_options(q(follow="false"), "p").follow is False
    assert o.since_ns(0) == 1795953600 * NS
    assert podlogs.log_options(q(sinceSeconds="10"), "p").since_ns(100 * NS) == 90 * NS
    e = refused(q(tailLines="3x"))
    assert (e.code, e.message) == (400, 'strconv.ParseInt: parsing "3x": invalid syntax')
    e = refused(q(limitBytes="99999999999999999999"))
    assert e.message == 'strconv.ParseInt: parsing "99999999999999999999": value out of range'
    e = refused(q(sinceTime="yesterday"))
    assert e.code == 400 and e.message.startswith(
        'parsing time "yesterday" as "2006-01-02T15:04:05Z07:00": cannot parse'
    )


def test_validation_is_422_with_kubes_text() -> None:
    e = refused(q(tailLines="-1"))
    assert (e.code, e.reason) == (422, "Invalid")
    assert e.message == (
        'PodLogOptions "web-0" is invalid: tailLines: Invalid value: -1: '
        "must be greater than or equal to 0"
    )
    assert e.details and e.details["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: must be greater than or equal to 0",
            "field": "tailLines",
        }
    ]
    e = refused(q(sinceSeconds="5", sinceTime="2026-11-29T12:00:00Z", limitBytes="0"))
    assert e.message == (
        'PodLogOptions "web-0" is invalid: [limitBytes: Invalid value: 0: must be greater '
        "than 0, : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified]"
    )
    e = refused(q(sinceSeconds="0"))
    assert e.message.endswith("sinceSeconds: Invalid value: 0: must be greater than 0")


def pod(containers: list[str], **status: object) -> Pod:
    return Pod.model_validate(
        {
            "metadata": {"name": "web-0", "namespace": "default", "uid": "u1"},
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": n} for n in containers],
                "initContainers": [{"name": "init"}],
            },
            "status": status,
        }
    )


def bad(fn, *args) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(APIError) as e:
        fn(*args)
    assert e.value.code == 400
    return e.value.message


def test_the_container_chosen_as_kube_apiserver() -> None:
    assert podlogs.log_container(pod(["web"]), "") == "web"
    assert podlogs.log_container(pod(["web", "side"]), "init") == "init"
    assert bad(podlogs.log_container, pod(["web", "side"]), "") == (
        "a container name must be specified for pod web-0, choose one of: [init web side]"
    )
    assert bad(podlogs.log_container, pod(["web"]), "nope") == (
        "container nope is not valid for pod web-0"
    )


def cs(**state: object) -> dict[str, object]:
    return {"name": "web", "containerID": "svclab://1", **state}


def test_kubelets_refusals_from_the_container_status() -> None:
    check = podlogs.container_log_status
    running = pod(["web"], phase="Running", containerStatuses=[cs(state={"running": {}})])
    check(running, "web", False)
    assert bad(check, running, "web", True) == (
        'previous terminated container "web" in pod "web-0" not found'
    )
    restarted = pod(
        ["web"],
        phase="Running",
        containerStatuses=[
            cs(state={"running": {}}, lastState={"terminated": {"containerID": "svclab://0"}})
        ],
    )
    check(restarted, "web", True)
    creating = pod(["web"], phase="Pending")  # scheduled, no status yet
    assert bad(check, creating, "web", False) == (
        'container "web" in pod "web-0" is waiting to start: ContainerCreating'
    )
    pulling = pod(
        ["web"],
        phase="Pending",
        containerStatuses=[cs(state={"waiting": {"reason": "ErrImagePull"}})],
    )
    assert bad(check, pulling, "web", False) == (
        'container "web" in pod "web-0" is waiting to start: image can\'t be pulled'
    )
    assert bad(check, running, "init", False) == 'container "init" in pod "web-0" is not available'
    never = pod(
        ["web"], phase="Failed", containerStatuses=[{"name": "web", "state": {"terminated": {}}}]
    )
    assert bad(check, never, "web", False) == 'container "web" in pod "web-0" is terminated'
    unknown = pod(["web"], phase="Running", containerStatuses=[{"name": "web", "state": {}}])
    assert bad(check, unknown, "web", False) == (
        'container "web" in pod "web-0" is waiting to start - no logs yet'
    )
