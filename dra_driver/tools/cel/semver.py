"""Semantic versions as Kubernetes' CEL ``semver`` library sees them (``github.com/blang/semver/v4``).

Owns: strict SemVer 2.0.0 parsing (``blang/semver.Parse``), Kubernetes' ``normalize`` option
(``semverlib.go`` ``normalizeAndParse``: strip a leading ``v``, pad ``1.2`` to ``1.2.0``, drop leading
zeros), and precedence (numeric pre-release identifiers sort below alphanumeric ones; a release sorts
above its pre-releases; build metadata never counts).  Version attributes of a ResourceSlice are
parsed here too.

Must never: import celpy, accept what blang rejects (``1.2``, ``01.2.3``, ``1.2.3-``) without
``normalize``, or do I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

_NUMBERS = frozenset("0123456789")
_ALPHANUM = _NUMBERS | frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")


class SemverError(ValueError):
    """Not a semantic version; the message is blang/semver's."""


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """A parsed version.  ``==`` and ordering follow SemVer precedence (build metadata ignored)."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()
    text: str | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, text: str, *, normalize: bool = False) -> Semver:
        """``semver.Parse`` (strict) or, with ``normalize``, Kubernetes' tolerant form."""
        return _parse(_normalized(text) if normalize else text, original=text)

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by SemVer precedence."""
        left = (self.major, self.minor, self.patch)
        right = (other.major, other.minor, other.patch)
        if left != right:
            return -1 if left < right else 1
        if not self.pre or not other.pre:
            # A release sorts above its own pre-releases.
            return (not self.pre) - (not other.pre)
        for mine, theirs in zip(self.pre, other.pre, strict=False):
            order = _compare_identifier(mine, theirs)
            if order:
                return order
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other: Semver) -> bool:
        return self.compare(other) < 0

    def __le__(self, other: Semver) -> bool:
        return self.compare(other) <= 0

    def __gt__(self, other: Semver) -> bool:
        return self.compare(other) > 0

    def __ge__(self, other: Semver) -> bool:
        return self.compare(other) >= 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(part) for part in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


def _compare_identifier(left: int | str, right: int | str) -> int:
    if isinstance(left, int) and isinstance(right, int):
        return (left > right) - (left < right)
    if isinstance(left, int):
        return -1  # numeric identifiers have lower precedence than alphanumeric ones
    if isinstance(right, int):
        return 1
    return (left > right) - (left < right)


def _normalized(text: str) -> str:
    """Kubernetes' ``normalizeAndParse`` rewriting, before the strict parse."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            trimmed = part.lstrip("0")
            if not trimmed or trimmed[0] not in _NUMBERS:
                trimmed = "0" + trimmed
            parts[index] = trimmed
    if len(parts) < 3:
        if any(mark in parts[-1] for mark in "+-"):
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend("0" for _ in range(3 - len(parts)))
    return ".".join(parts)


def _number(text: str, what: str) -> int:
    if not set(text) <= _NUMBERS:
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    if not text:
        raise SemverError(f'strconv.ParseUint: parsing "": invalid syntax ({what} number)')
    value = int(text)
    if value >= 1 << 64:
        raise SemverError(f"{what} number {text!r} out of range")
    return value


def _parse(text: str, *, original: str) -> Semver:
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    patch_text, plus, build_text = parts[2].partition("+")
    patch_text, minus, pre_text = patch_text.partition("-")
    patch = _number(patch_text, "patch")
    pre: list[int | str] = []
    if minus:
        for identifier in pre_text.split("."):
            if not identifier:
                raise SemverError("Prerelease is empty")
            if set(identifier) <= _NUMBERS:
                if len(identifier) > 1 and identifier[0] == "0":
                    raise SemverError(f"Prerelease number must not contain leading zeroes {identifier!r}")
                pre.append(int(identifier))
            elif set(identifier) <= _ALPHANUM:
                pre.append(identifier)
            else:
                raise SemverError(f"Invalid character(s) found in prerelease {identifier!r}")
    build: list[str] = []
    if plus:
        for identifier in build_text.split("."):
            if not identifier:
                raise SemverError("Build meta data is empty")
            if not set(identifier) <= _ALPHANUM:
                raise SemverError(f"Invalid character(s) found in build meta data {identifier!r}")
            build.append(identifier)
    return Semver(major, minor, patch, tuple(pre), tuple(build), original)
