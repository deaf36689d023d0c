"""The refusal every part of the engine raises: a request refused before acceptance, with its
status and a message naming the field and the limit."""

from __future__ import annotations

import grpc


class Refused(Exception):
    """A request refused before acceptance: its status and a message naming field and limit."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.code = code
        self.message = message
