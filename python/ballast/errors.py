"""BallastError: a failed C call, with the C status code and its message."""
import enum


class Code(enum.IntEnum):
    """ballast_code (ballast.h): ballast::ErrorCode's values, plus INVALID_HANDLE."""
    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    PATH_ESCAPES = 3
    OUT_OF_BOUNDS = 4
    SIZE_MISMATCH = 5
    OVERFLOW = 6
    MALFORMED = 7
    UNSUPPORTED = 8
    IO = 9
    UNAVAILABLE = 10
    OUT_OF_MEMORY = 11
    DEVICE_ERROR = 12
    ABI_MISMATCH = 13
    WRONG_KIND = 14
    CHECKSUM_MISMATCH = 15
    INTERNAL = 16
    INVALID_HANDLE = 64


class BallastError(Exception):
    """Raised for every status a C call returns: `.code` (a Code, or the raw
    int for a code newer than this module) and `.message` (the C message,
    "<code>: <what> [where]")."""

    def __init__(self, code, message):
        try:
            code = Code(code)
        except ValueError:
            pass
        self.code = code
        self.message = message
        super().__init__(message)

    def __reduce__(self):
        return (type(self), (int(self.code), self.message))
