"""The exception hierarchy: every error a user can cause is an InferlabError with a message that names
the problem and the fix. Internal invariants use `assert`, never these classes."""


class InferlabError(Exception):
    """Base of every error inferlab raises on purpose."""


class ConfigError(InferlabError):
    """A configuration value is invalid or two values contradict each other."""


class InputError(InferlabError):
    """User data is unusable: a bad SMILES, an empty prompt, a prompt longer than the context, bad JSON."""


class UnsupportedError(InferlabError):
    """The request is valid but this build cannot serve it (architecture, kernel, tokenizer, device)."""


class CapacityError(InferlabError):
    """The configuration cannot fit the device (slots x length over free memory)."""


class EngineClosedError(InferlabError):
    """A call on an Engine after its close() (or after its `with` block ended)."""


class OutputError(InferlabError):
    """A file could not be written (disk full, a read-only folder, no permission): the message names the
    file and the fix. Raised where the writer knows the path; the rows flushed before it stay."""


# errno -> what to do about it (the names, not the numbers: they differ between systems)
_WRITE_FIXES = {
    "ENOSPC": "the disk is full: free space there or write to another folder",
    "EDQUOT": "the disk quota is used up: free space there or write to another folder",
    "EFBIG": "the file is over the size limit of this process or file system: raise the limit or write elsewhere",
    "EROFS": "the file system is read-only: write to a folder on a writable one",
    "EACCES": "there is no permission to write there: write to a folder you may write to, or change its permissions",
    "EPERM": "the operation is not permitted there: write to a folder you may write to, or change its permissions",
}


def is_write_failure(error: OSError) -> bool:
    """Whether `error` is one a write meets for a reason outside the program (a full disk, a read-only
    folder, no permission), which write_failed explains."""
    import errno

    return errno.errorcode.get(error.errno or 0, "") in _WRITE_FIXES


def write_failed(path: object, error: OSError) -> OutputError:
    """The OutputError of an OSError met while writing `path`."""
    import errno

    fix = _WRITE_FIXES.get(errno.errorcode.get(error.errno or 0, ""), "check that the path can be written")
    return OutputError(f"cannot write {path} ({error.strerror or error}): {fix}, then rerun the same command "
                       "(what was finished is kept)")
