"""The pyarrow.compute kernels the readers use, called without importing pyarrow.compute.

Importing pyarrow.compute builds a Python wrapper for each of its ~300 kernels (~15 ms, more
than a short log takes to analyse); the kernels themselves live in pyarrow._compute and are
called by name. Each function here passes the same options pyarrow.compute's wrapper of that
name would, so the results are the same arrays. ``Compute()`` raises ImportError where
pyarrow has no such module (the readers then use pyarrow.compute).
"""
from __future__ import annotations


class Compute:
    """The subset of pyarrow.compute that gpumon.analyze.readers calls."""

    def __init__(self):
        import pyarrow._compute as c
        self._c = c
        self._call = c.call_function

    def __getattr__(self, name):
        # Kernels without options, called as they are: pc.<name>(*arrays).
        if name not in _PLAIN:
            raise AttributeError(name)
        call, kernel_name = self._call, _KERNEL.get(name, name)

        def kernel(*args):
            return call(kernel_name, list(args))
        kernel.__name__ = name
        setattr(self, name, kernel)
        return kernel

    def cast(self, arr, target_type):
        return self._call("cast", [arr], self._c.CastOptions.safe(target_type))

    def ascii_rtrim(self, s, characters: str):
        return self._call("ascii_rtrim", [s], self._c.TrimOptions(characters))

    def utf8_rtrim(self, s, characters: str):
        return self._call("utf8_rtrim", [s], self._c.TrimOptions(characters))

    def is_in(self, values, value_set):
        return self._call("is_in", [values], self._c.SetLookupOptions(value_set))

    def index_in(self, values, value_set):
        return self._call("index_in", [values], self._c.SetLookupOptions(value_set))

    def starts_with(self, s, pattern: str):
        return self._call("starts_with", [s], self._c.MatchSubstringOptions(pattern))

    def match_substring_regex(self, s, pattern: str):
        return self._call("match_substring_regex", [s], self._c.MatchSubstringOptions(pattern))

    def replace_substring(self, s, pattern: str, replacement: str):
        return self._call("replace_substring", [s],
                          self._c.ReplaceSubstringOptions(pattern, replacement))

    def replace_substring_regex(self, s, pattern: str, replacement: str):
        return self._call("replace_substring_regex", [s],
                          self._c.ReplaceSubstringOptions(pattern, replacement))

    def utf8_slice_codeunits(self, s, start: int, stop: int):
        return self._call("utf8_slice_codeunits", [s], self._c.SliceOptions(start, stop))

    def utf8_replace_slice(self, s, start: int, stop: int, replacement: str):
        return self._call("utf8_replace_slice", [s],
                          self._c.ReplaceSliceOptions(start, stop, replacement))

    def strptime(self, s, format: str, unit: str, error_is_null: bool = False):
        return self._call("strptime", [s], self._c.StrptimeOptions(format, unit, error_is_null))


# Kernels called with their default options (or none): the name is enough.
_PLAIN = frozenset((
    "and_kleene", "any", "ascii_trim_whitespace", "binary_length", "dictionary_encode", "filter",
    "if_else", "invert", "is_null", "is_valid", "not_equal", "or_", "or_kleene", "unique",
    "utf8_length", "utf8_lower", "utf8_trim_whitespace"))
# Kernels whose pyarrow.compute name differs (a Python keyword).
_KERNEL = {"or_": "or"}
