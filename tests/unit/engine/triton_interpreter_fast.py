"""Two memos for Triton's interpreter (triton/runtime/interpreter.py), installed by triton_interpreter_cases.py in
the child process that runs it (tests/triton_interpreter_child.py): the same kernels run the same way, in about
a third less time. Nothing in src/ changes; the interpreter's own code is checked first (install() leaves an
interpreter whose code differs from what was read untouched: slower, the same checks).

1. The interpreter swaps triton.language's builtins for interpreted ones (`_patch_lang(fn)`) at every kernel
   launch (GridExecutor.__call__, restored when the launch ends) and again at every call of a @triton.jit
   helper inside a kernel, for every program of the grid (InterpretedFunction.__call__, never restored): tens of
   thousands of `inspect.getmembers` walks over triton.language per test file, ~25% of the child's time. What
   `_patch_lang(fn)` sets depends on `fn` only through which of triton.language and triton.language.core its
   globals hold (the "langs"): each lang's module-level builtins and helpers (range, static_assert, ...; for
   triton.language also triton.language.math's builtins), and, whichever lang, the tensor, dtype, condition and
   tensor-descriptor classes' members and reduce/associative_scan on both modules. A helper's call is skipped
   while a kernel launch is running and each of the helper's langs is one the launch patched, or one a helper
   call patched before with no launch of that lang restored since (only a launch's restore can undo a
   module-level patch; a helper's is never undone): then every attribute it would set already holds the patched
   function (its builtins were replaced by wrappers, which it would leave alone; the rest it would set to a
   fresh closure of the same code). Anything else runs the interpreter's own `_patch_lang`.
2. `_get_np_dtype` builds a dict of 19 numpy dtypes at each of its ~700,000 calls; for a plain scalar
   triton dtype, or a block of one, its answer depends only on that scalar dtype's name (triton dtypes compare
   by name), so it is kept per name. Pointers, blocks of pointers and any other type go through the
   interpreter's own function.
"""

from __future__ import annotations

import hashlib
import inspect

# sha256 of the source of each function the memos stand in for or rely on, as read (triton 3.9.0): another
# triton leaves the interpreter as it is
READ = {
    "_patch_lang": "e5beeba74ada48294c1d0dbee3e55a5ac185992e2197b7ee706f3f061d880989",
    "_get_np_dtype": "8f20d41e3207891ae9872819aff05bee11d5c9bbe24f772282cb3ac72749fc75",
    "GridExecutor.__call__": "e52d3746b0f33a88dd4e678c0dc5a9fb518efc986cebccc61e16185fd8860d46",
    "InterpretedFunction.__call__": "f2446df46264004916b677478c2eef6ef349bd2c04a99da9eade596b78cd54d8",
    "_patch_attr": "e0c1b7d65a2463cded6ceead54250e0d8274c39bd6b7b92a8f48910ecd774dbe",
    "_patch_builtin": "3c21c270fa61fb24d402b2c9bf3d3981f0c8ebaf42e8fd8322872935e60735ce",
    "_patch_lang_tensor": "7c7aba5262fda6ed412ee905d99e1968f4282005ad04e8e2bfc5a02edba204cf",
    "_patch_lang_core": "65cf7cf4d724979d1741e6c7e5826825a7178eb591663cb1974630f1fd724782",
    "_patch_reduce_scan": "ff294418b913c41c56f2ff2b7cc4a104081395c8e676c73d60e118c83cfc7852",
}


def _source_digests(ti) -> dict[str, str]:
    functions = {
        "_patch_lang": ti._patch_lang,
        "_get_np_dtype": ti._get_np_dtype,
        "GridExecutor.__call__": ti.GridExecutor.__call__,
        "InterpretedFunction.__call__": ti.InterpretedFunction.__call__,
        "_patch_attr": ti._patch_attr,
        "_patch_builtin": ti._patch_builtin,
        "_patch_lang_tensor": ti._patch_lang_tensor,
        "_patch_lang_core": ti._patch_lang_core,
        "_patch_reduce_scan": ti._patch_reduce_scan,
    }
    return {name: hashlib.sha256(inspect.getsource(f).encode()).hexdigest() for name, f in functions.items()}


def install() -> bool:
    """Install both memos if the interpreter's code is the code read; whether they were installed."""
    import triton.language as tl
    from triton.runtime import interpreter as ti

    if getattr(ti, "_inferlab_fast", False):
        return True
    if _source_digests(ti) != READ:
        return False
    langs_known = {id(tl): tl, id(tl.core): tl.core}
    patch_lang = ti._patch_lang
    launches: list[frozenset[int]] = []  # the langs of each kernel launch running now (one at most in practice)
    helper_patched: set[int] = set()  # langs a helper's call patched, not restored by a launch since

    def langs(fn) -> frozenset[int]:
        """The ids of triton.language / triton.language.core among fn's globals (`_patch_lang`'s `langs`)."""
        return frozenset(id(v) for v in fn.__globals__.values() if id(v) in langs_known and v is langs_known[id(v)])

    def launch_patch_lang(fn):
        """GridExecutor.__call__'s `_patch_lang`: the interpreter's, its launch's langs recorded until restored."""
        key = langs(fn)
        scope = patch_lang(fn)
        launches.append(key)
        restore = scope.restore

        def restore_and_forget():
            try:
                restore()
            finally:
                launches.pop()
                helper_patched.difference_update(key)  # this restore may have undone a helper's patch of them

        scope.restore = restore_and_forget
        return scope

    def helper_call(self, *args, **kwargs):
        """InterpretedFunction.__call__ (a @triton.jit helper called inside a kernel), its `_patch_lang` skipped
        when every attribute it would set holds the patched function already."""
        key = langs(self.fn)
        if not (key and launches and key <= helper_patched.union(*launches)):
            patch_lang(self.fn)
            helper_patched.update(key)
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise ti.InterpreterError(repr(e)) from e

    get_np_dtype = ti._get_np_dtype
    by_name: dict[str, object] = {}

    def np_dtype(tt_dtype):
        scalar = tt_dtype.element_ty if type(tt_dtype) is tl.block_type else tt_dtype  # a block: its element's
        if type(scalar) is not tl.dtype:  # pointers, blocks of pointers, anything else: the interpreter's own
            return get_np_dtype(tt_dtype)
        found = by_name.get(scalar.name)
        if found is None:
            found = by_name[scalar.name] = get_np_dtype(scalar)
        return found

    ti._patch_lang = launch_patch_lang  # GridExecutor.__call__ looks it up as a module global
    ti.InterpretedFunction.__call__ = helper_call
    ti._get_np_dtype = np_dtype
    ti._inferlab_fast = True
    return True
