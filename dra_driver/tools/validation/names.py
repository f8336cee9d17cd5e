"""Name rules with kube's regexes and messages: DNS labels and subdomains, label keys and values, C
identifiers, and the DRA names built from them (driver, pool, device, request, counter, qualified
attribute names, extended resource names).

The ``is_*`` functions return kube's message strings (empty when valid), as apimachinery's
``util/validation`` does; the ``validate_*`` functions turn them into field errors at a path.  An empty
required name is ``Required value`` rather than a regex complaint about the empty string.
"""

from __future__ import annotations

import re
from typing import Final

from dra_driver.tools.validation import limits
from dra_driver.tools.validation.errors import FieldError, invalid, required, too_long
from dra_driver.tools.validation.fields import byte_length
from dra_driver.tools.validation.paths import FieldPath

DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT: Final = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
C_IDENTIFIER_FMT: Final = "[A-Za-z_][A-Za-z0-9_]*"
LABEL_KEY_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT: Final = "(" + LABEL_KEY_FMT + ")?"

_DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_C_IDENTIFIER_MSG: Final = (
    "a valid C identifier must start with alphabetic character or '_', "
    "followed by a string of alphanumeric characters or '_'"
)
_LABEL_KEY_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)

_DNS1123_LABEL: Final = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN: Final = re.compile(DNS1123_SUBDOMAIN_FMT)
_C_IDENTIFIER: Final = re.compile(C_IDENTIFIER_FMT)
_LABEL_KEY: Final = re.compile(LABEL_KEY_FMT)
_LABEL_VALUE: Final = re.compile(LABEL_VALUE_FMT)

# Extended resource names (core/helper.IsExtendedResourceName).
_NATIVE_RESOURCE_DOMAIN: Final = "kubernetes.io/"
_QUOTA_REQUESTS_PREFIX: Final = "requests."


def regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's ``RegexError``, including its odd ``'a',  or 'b'`` spacing."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    text = message + " (e.g. "
    for position, example in enumerate(examples):
        if position > 0:
            text += " or "
        text += f"'{example}', "
    return text + f"regex used for validation is '{fmt}')"


def max_len_error(max_bytes: int) -> str:
    """apimachinery's ``MaxLenError`` (which counts bytes but says characters)."""
    return f"must be no more than {max_bytes} characters"


def is_dns1123_label(value: str) -> list[str]:
    """``IsDNS1123Label``: at most 63 bytes of ``[a-z0-9-]``, alphanumeric at both ends."""
    messages = []
    if byte_length(value) > limits.DNS1123_LABEL_MAX_BYTES:
        messages.append(max_len_error(limits.DNS1123_LABEL_MAX_BYTES))
    if not _DNS1123_LABEL.fullmatch(value):
        if _DNS1123_SUBDOMAIN.fullmatch(value):
            messages.append("must not contain dots")
        else:
            messages.append(regex_error(_DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return messages


def is_dns1123_subdomain(value: str) -> list[str]:
    """``IsDNS1123Subdomain``: at most 253 bytes of dot-separated DNS labels."""
    messages = []
    if byte_length(value) > limits.DNS1123_SUBDOMAIN_MAX_BYTES:
        messages.append(max_len_error(limits.DNS1123_SUBDOMAIN_MAX_BYTES))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        messages.append(regex_error(_DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return messages


def is_c_identifier(value: str) -> list[str]:
    """``IsCIdentifier`` (format only, not length)."""
    if _C_IDENTIFIER.fullmatch(value):
        return []
    return [regex_error(_C_IDENTIFIER_MSG, C_IDENTIFIER_FMT, "my_name", "MY_NAME", "MyName")]


def is_qualified_name(value: str) -> list[str]:
    """``IsQualifiedName`` (a label key): ``[<DNS subdomain>/]<name of at most 63 bytes>``."""
    messages: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            messages.append("prefix part must be non-empty")
        else:
            messages.extend("prefix part " + message for message in is_dns1123_subdomain(prefix))
    else:
        key_error = regex_error(_LABEL_KEY_MSG, LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        return [
            f"a valid label key {key_error} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        messages.append("name part must be non-empty")
    elif byte_length(name) > limits.LABEL_KEY_NAME_MAX_BYTES:
        messages.append("name part " + max_len_error(limits.LABEL_KEY_NAME_MAX_BYTES))
    if not _LABEL_KEY.fullmatch(name):
        messages.append("name part " + regex_error(_LABEL_KEY_MSG, LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return messages


def is_label_value(value: str) -> list[str]:
    """``IsValidLabelValue``: empty, or at most 63 bytes of ``[A-Za-z0-9-_.]`` alphanumeric at both ends."""
    messages = []
    if byte_length(value) > limits.LABEL_VALUE_MAX_BYTES:
        messages.append(max_len_error(limits.LABEL_VALUE_MAX_BYTES))
    if not _LABEL_VALUE.fullmatch(value):
        messages.append(regex_error(_LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return messages


def is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName``: domain-prefixed, outside ``kubernetes.io/``, a label key under ``requests.``."""
    native = "/" not in name or _NATIVE_RESOURCE_DOMAIN in name
    if native or name.startswith(_QUOTA_REQUESTS_PREFIX):
        return False
    return not is_qualified_name(_QUOTA_REQUESTS_PREFIX + name)


def _invalid_each(path: FieldPath, value: str, messages: list[str]) -> list[FieldError]:
    return [invalid(path, value, message) for message in messages]


def validate_dns_label(value: str, path: FieldPath) -> list[FieldError]:
    """A required DNS label: device, request, counter and counter-set names."""
    if not value:
        return [required(path)]
    return _invalid_each(path, value, is_dns1123_label(value))


def validate_dns_subdomain(value: str, path: FieldPath) -> list[FieldError]:
    """A required DNS subdomain: device class names, node names."""
    if not value:
        return [required(path)]
    return _invalid_each(path, value, is_dns1123_subdomain(value))


def validate_driver_name(value: str, path: FieldPath) -> list[FieldError]:
    """A driver name (also the domain of a qualified name): a lower-case DNS subdomain of at most 63 bytes.

    kube's ``ValidateCSIDriverName`` lower-cases before matching; the API requires lower case
    (docs/resource-api.md), so upper case is rejected here with the lower-case subdomain message.
    """
    if not value:
        return [required(path)]
    errors = []
    if byte_length(value) > limits.DRIVER_NAME_MAX_BYTES:
        errors.append(too_long(path, limits.DRIVER_NAME_MAX_BYTES))
    errors.extend(_invalid_each(path, value, is_dns1123_subdomain(value)))
    return errors


def validate_pool_name(value: str, path: FieldPath) -> list[FieldError]:
    """A pool name: at most 253 bytes, one or more DNS subdomains separated by ``/``."""
    if not value:
        return [required(path)]
    errors = []
    if byte_length(value) > limits.POOL_NAME_MAX_BYTES:
        errors.append(too_long(path, limits.POOL_NAME_MAX_BYTES))
    for part in value.split("/"):
        errors.extend(_invalid_each(path, part, is_dns1123_subdomain(part)))
    return errors


def validate_c_identifier(value: str, path: FieldPath) -> list[FieldError]:
    """The identifier of a qualified name: a C identifier of at most 32 bytes."""
    errors = []
    if byte_length(value) > limits.QUALIFIED_NAME_MAX_ID_BYTES:
        errors.append(too_long(path, limits.QUALIFIED_NAME_MAX_ID_BYTES))
    errors.extend(_invalid_each(path, value, is_c_identifier(value)))
    return errors


def validate_qualified_name(name: str, path: FieldPath) -> list[FieldError]:
    """An attribute or capacity name: ``<C identifier>`` or ``<driver-style domain>/<C identifier>``."""
    parts = name.split("/")
    if len(parts) == 1:
        return validate_c_identifier(name, path)
    if len(parts) > 2:
        return [invalid(path, name, "must not contain more than one slash")]
    domain, identifier = parts
    errors = []
    if domain:
        errors.extend(validate_driver_name(domain, path))
    else:
        errors.append(invalid(path, "", "the domain must not be empty"))
    if identifier:
        errors.extend(validate_c_identifier(identifier, path))
    else:
        errors.append(invalid(path, "", "the name must not be empty"))
    return errors


def validate_fully_qualified_name(name: str, path: FieldPath) -> list[FieldError]:
    """A qualified name that must carry its domain (constraint attribute names)."""
    errors = validate_qualified_name(name, path)
    if "/" not in name:
        errors.append(invalid(path, name, "a fully qualified name must be a domain and a name separated by a slash"))
    return errors


def validate_label_name(value: str, path: FieldPath) -> list[FieldError]:
    """A label key (``ValidateLabelName``): taint and toleration keys, condition types."""
    return _invalid_each(path, value, is_qualified_name(value))


def validate_label_value(value: str, path: FieldPath) -> list[FieldError]:
    """A label value: taint and toleration values, node selector values."""
    return _invalid_each(path, value, is_label_value(value))
