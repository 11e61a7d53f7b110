"""The apiserver: validation, defaulting, admission and allocation in front of a Store."""

from control.apiserver.server import APIServer

__all__ = ["APIServer"]
