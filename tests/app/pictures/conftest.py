"""Clusters and readers for the pictures' tests: the 3-node example (examples/web.yaml)
and a 20-node cluster (cluster20.yaml), each built once per module; an SVG's text
labels (parsed with xml.etree) and a PNG's size (read from its IHDR header)."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from control.session import Session

ROOT = Path(__file__).resolve().parents[3]
WEB3 = ROOT / "examples" / "web.yaml"
CLUSTER20 = Path(__file__).resolve().parent / "cluster20.yaml"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def web3() -> Iterator[Session]:
    s = Session.from_files([WEB3])
    yield s
    s.close()


@pytest.fixture(scope="module")
def cluster20() -> Iterator[Session]:
    s = Session.from_files([CLUSTER20])
    yield s
    s.close()


def svg_root(data: bytes | str) -> ET.Element:
    """The parsed SVG (fails the test if it is not well-formed XML)."""
    root = ET.fromstring(data.encode() if isinstance(data, str) else data)
    assert root.tag == f"{SVG}svg"
    return root


def svg_texts(data: bytes | str) -> list[str]:
    """Every text element's content, in document order."""
    return [t.text or "" for t in svg_root(data).iter(f"{SVG}text")]


def svg_titles(data: bytes | str) -> list[str]:
    """Graphviz's ``<title>`` of every node, edge and cluster."""
    return [t.text or "" for t in svg_root(data).iter(f"{SVG}title")]


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def svg_points_size(data: bytes | str) -> tuple[float, float]:
    """The SVG's width and height in points (Graphviz writes ``1234pt``)."""
    root = svg_root(data)
    return float(root.get("width", "0pt")[:-2]), float(root.get("height", "0pt")[:-2])
