"""Typed errors raised by locsum. Every message says what was wrong and what to do."""

from __future__ import annotations


class LocsumError(Exception):
    """Base class of every error locsum raises on purpose."""


class InputError(LocsumError, ValueError):
    """The text or documents given to a summarizer cannot be used."""


class EmptyInputError(InputError):
    """The input is empty or holds only whitespace."""


class EncodingError(InputError):
    """The input bytes are not valid UTF-8."""


class InputTooLongError(InputError):
    """The input is over `max_tokens` (or its query over half a unit)."""


class MemoryLimitError(InputTooLongError):
    """Summarizing the input would take more memory than `memory_limit` allows."""


class FileFormatError(InputError):
    """A file is of a type locsum does not read, or damaged; names the type found or what is wrong."""


class EncryptedFileError(FileFormatError):
    """A file is encrypted (a PDF with a password) and no password, or a wrong one, was given."""


class NoTextError(FileFormatError):
    """A file holds no text to summarize (a scanned PDF without a text layer)."""


class FileTooLargeError(InputError):
    """A file is larger than the stated limit, or its archive expands beyond it (a zip bomb)."""


class DataError(InputError):
    """A data file (JSON Lines of examples) is empty or has a line that cannot be used; names file:line."""


class OptionError(LocsumError, ValueError):
    """An option is unknown or has a value outside its accepted range."""


class BundleError(LocsumError):
    """An engine bundle or checkpoint cannot be used."""


class BundleNotFoundError(BundleError, FileNotFoundError):
    """The bundle directory or one of its files does not exist."""


class BundleIntegrityError(BundleError):
    """A bundle file does not match the checksum in its manifest."""


class BundleVersionError(BundleError):
    """The bundle was written for another format version or model kind."""


class BackendUnavailableError(LocsumError, ImportError):
    """The requested backend's package is not installed."""


class BackendError(LocsumError, RuntimeError):
    """The inference engine failed while running a graph (for example, out of memory)."""


class ExportError(LocsumError):
    """An export failed or its output did not match the PyTorch model."""


class JobLockedError(LocsumError):
    """Another running job holds the output a corpus job would write; names its process."""
