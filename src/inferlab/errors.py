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
