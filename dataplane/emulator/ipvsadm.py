"""Compatibility name: the ``ipvsadm-save`` parser lives in
:mod:`dataplane.netfilter.ipvsadm` (it turns a tool's text into engine state)."""

from dataplane.netfilter.ipvsadm import parse_ipvsadm

__all__ = ["parse_ipvsadm"]
