"""``kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration``, with upstream's defaults.

Unknown fields are errors (kube-proxy's strict decoding). ``clusterCIDR`` keeps the
difference between *unset* (``None``: the Cluster's podCIDR is used) and *explicitly
empty* (``""``: local-traffic detection off), as upstream does.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from netmodel.errors import InputError
from netmodel.ip import parse_cidr

API_VERSION = "kubeproxy.config.k8s.io/v1alpha1"


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_seconds(text: str, *, field: str = "") -> float:
    """A Go ``time.Duration`` string (``"1s"``, ``"500ms"``, ``"1m30s"``, ``"0"``) in
    seconds, as ``time.ParseDuration`` reads it (no sign accepted: kube-proxy's periods
    are never negative). InputError naming ``field`` otherwise."""
    t = text.strip()
    if t == "0":
        return 0.0
    total, pos = 0.0, 0
    for m in _DURATION_PART.finditer(t):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if not t or pos != len(t):
        raise InputError(f"invalid duration {text!r}", field=field or None)
    return total


class _Strict(BaseModel):
    model_config = ConfigDict(
        frozen=True, populate_by_name=True, alias_generator=to_camel, extra="forbid"
    )


class IPTablesConfig(_Strict):
    masquerade_all: bool = False
    masquerade_bit: int = 14
    localhost_node_ports: bool = True
    sync_period: str = "30s"
    min_sync_period: str = "1s"

    @field_validator("sync_period", "min_sync_period")
    @classmethod
    def _period(cls, v: str) -> str:
        try:
            duration_seconds(v)
        except InputError as e:
            raise ValueError(str(e)) from None
        return v

    @field_validator("masquerade_bit")
    @classmethod
    def _bit(cls, v: int) -> int:
        if not 0 <= v <= 31:
            raise ValueError("must be within the range [0, 31]")
        return v


class IPVSConfig(_Strict):
    scheduler: str = ""
    sync_period: str = "30s"
    min_sync_period: str = "0s"
    exclude_cidrs: list[str] = Field(default_factory=list, alias="excludeCIDRs")
    strict_arp: bool = Field(default=False, alias="strictARP")
    tcp_timeout: str = "0s"
    tcp_fin_timeout: str = "0s"
    udp_timeout: str = "0s"

    @field_validator("scheduler")
    @classmethod
    def _sched(cls, v: str) -> str:
        allowed = {"", "rr", "wrr", "lc", "wlc", "lblc", "lblcr", "sh", "dh", "sed", "nq", "mh"}
        if v not in allowed:
            raise ValueError(f"unknown IPVS scheduler {v!r}")
        return v

    @property
    def effective_scheduler(self) -> str:
        return self.scheduler or "rr"


class NFTablesConfig(_Strict):
    masquerade_all: bool = False
    masquerade_bit: int = 14
    sync_period: str = "30s"
    min_sync_period: str = "1s"

    @field_validator("sync_period", "min_sync_period")
    @classmethod
    def _period(cls, v: str) -> str:
        try:
            duration_seconds(v)
        except InputError as e:
            raise ValueError(str(e)) from None
        return v


class ConntrackConfig(_Strict):
    max_per_core: int | None = 32768
    min: int | None = 131072
    tcp_established_timeout: str = "24h0m0s"
    tcp_close_wait_timeout: str = "1h0m0s"
    tcp_be_liberal: bool = False
    udp_timeout: str = "0s"
    udp_stream_timeout: str = "0s"


class DetectLocalConfig(_Strict):
    bridge_interface: str = ""
    interface_name_prefix: str = ""


class KubeProxyConfiguration(_Strict):
    api_version: Literal["kubeproxy.config.k8s.io/v1alpha1"] = Field(
        default="kubeproxy.config.k8s.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["KubeProxyConfiguration"] = "KubeProxyConfiguration"
    mode: Literal["", "iptables", "ipvs", "nftables"] = ""
    cluster_cidr: str | None = Field(default=None, alias="clusterCIDR")
    detect_local_mode: Literal[
        "", "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix"
    ] = ""
    detect_local: DetectLocalConfig = Field(default_factory=DetectLocalConfig)
    iptables: IPTablesConfig = Field(default_factory=IPTablesConfig)
    ipvs: IPVSConfig = Field(default_factory=IPVSConfig)
    nftables: NFTablesConfig = Field(default_factory=NFTablesConfig)
    conntrack: ConntrackConfig = Field(default_factory=ConntrackConfig)
    node_port_addresses: list[str] = Field(default_factory=list)
    hostname_override: str = ""
    bind_address: str = "0.0.0.0"
    healthz_bind_address: str = "0.0.0.0:10256"
    metrics_bind_address: str = "127.0.0.1:10249"
    bind_address_hard_fail: bool = False
    enable_profiling: bool = False
    feature_gates: dict[str, bool] = Field(default_factory=dict)
    client_connection: dict[str, Any] = Field(default_factory=dict)
    logging: dict[str, Any] = Field(default_factory=dict)
    oom_score_adj: int | None = -999
    port_range: str = ""
    config_sync_period: str = "15m0s"
    show_hidden_metrics_for_version: str = ""
    winkernel: dict[str, Any] = Field(default_factory=dict)
    windows_run_as_service: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("cluster_cidr")
    @classmethod
    def _cidrs(cls, v: str | None) -> str | None:
        if v:
            for part in v.split(","):
                try:
                    parse_cidr(part, strict=False)
                except ValueError:
                    raise ValueError(f"invalid CIDR {part!r}") from None
        return v

    @field_validator("node_port_addresses")
    @classmethod
    def _npa(cls, v: list[str]) -> list[str]:
        for item in v:
            if item == "primary":
                continue
            try:
                parse_cidr(item, strict=False)
            except ValueError:
                raise ValueError(f"invalid CIDR {item!r} (or 'primary')") from None
        return v

    @property
    def effective_mode(self) -> str:
        return self.mode or "iptables"

    @property
    def effective_detect_local_mode(self) -> str:
        return self.detect_local_mode or "ClusterCIDR"


def proxy_config_from_dict(
    data: dict[str, Any], *, file: str | None = None, doc: int | None = None
) -> KubeProxyConfiguration:
    """Validate a KubeProxyConfiguration; errors become a one-line InputError."""
    try:
        return KubeProxyConfiguration.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        raise InputError(
            msg, file=file, document=doc, obj="KubeProxyConfiguration", field=loc
        ) from None
