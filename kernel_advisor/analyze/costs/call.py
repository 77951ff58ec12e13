"""One recorded call: argument shapes, dtypes and concrete values, read by position.

Every reader raises Unmodelled when the argument is not what the formula expects, so a
formula never guesses: op_cost turns that into None.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Sequence

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.shapes import Shape, Unmodelled, numel

_MISSING = object()


@dataclass(frozen=True)
class Tensor:
    shape: Shape
    dtype: str

    @property
    def numel(self) -> int:
        return numel(self.shape)

    @property
    def bytes(self) -> int:
        return self.numel * dt.checked_itemsize_bytes(self.dtype)


@dataclass(frozen=True)
class OpCall:
    name: str
    shapes: tuple[Any, ...]
    dtypes: tuple[Any, ...]
    concrete: tuple[str, ...]
    # The concrete values a formula read, by position: the arguments its cost depends on
    # (registry.cost_arguments groups op rows by them). A Scalar read only for its type
    # promotion category is kept as that category, not its value.
    reads: dict[int, str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_trace(cls, name: str, shapes: Sequence, dtypes: Sequence,
                   concrete: Sequence | None) -> "OpCall":
        if not isinstance(shapes, (list, tuple)) or not isinstance(dtypes, (list, tuple)):
            raise Unmodelled("input shapes and dtypes must be lists")
        concrete = list(concrete or [])
        concrete += [""] * (len(shapes) - len(concrete))
        return cls(name, tuple(shapes), tuple(dt.normalize_dtype(d) for d in dtypes),
                   tuple("" if c is None else str(c) for c in concrete))

    # -- tensors -------------------------------------------------------------------------
    def has_tensor(self, i: int) -> bool:
        """A tensor argument is present at i (False for None, scalars, lists, absent args)."""
        if i >= len(self.shapes) or i >= len(self.dtypes):
            return False
        dtype, shape = self.dtypes[i], self.shapes[i]
        if dt.is_dtype_name(dtype):
            return True
        # A recorded non-empty shape of ints with an unknown dtype name is still a tensor.
        return bool(shape) and all(isinstance(s, int) for s in shape) and dtype not in (
            dt.SCALAR, dt.NONE, dt.TENSOR_LIST)

    def tensor(self, i: int) -> Tensor:
        if not self.has_tensor(i):
            raise Unmodelled(f"{self.name}: argument {i} is not a recorded tensor")
        dtype = self.dtypes[i]
        if not dt.is_dtype_name(dtype):
            raise Unmodelled(f"{self.name}: unknown dtype {dtype!r}")
        shape = self.shapes[i]
        if not isinstance(shape, (list, tuple)) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise Unmodelled(f"{self.name}: bad shape {shape!r}")
        return Tensor(tuple(shape), dtype)

    def optional_tensor(self, i: int) -> Tensor | None:
        return self.tensor(i) if self.has_tensor(i) else None

    def tensors(self, positions: Sequence[int]) -> list[Tensor]:
        return [self.tensor(i) for i in positions if self.has_tensor(i)]

    def list_shapes(self, i: int) -> list[Shape]:
        """The element shapes of a Tensor[] argument (torch.profiler records them nested)."""
        shapes = self.shapes[i] if i < len(self.shapes) else None
        if not isinstance(shapes, (list, tuple)) or not all(
                isinstance(s, (list, tuple)) and all(
                    isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in s)
                for s in shapes):
            raise Unmodelled(f"{self.name}: argument {i} is not a tensor list")
        return [tuple(s) for s in shapes]

    def tensor_list(self, i: int, unrecorded_dtype: str | None = None) -> list[Tensor]:
        """A Tensor[] argument. torch.profiler records its shapes but not its dtypes, so the
        dtype entry must be a dtype name (all elements) or a list of names (one per element);
        a bare "TensorList" takes `unrecorded_dtype` when the formula supplies one."""
        shapes = self.list_shapes(i)
        entry = self.dtypes[i] if i < len(self.dtypes) else dt.NONE
        if entry == dt.NONE:  # None, or an optional-tensor list the profiler did not record
            raise Unmodelled(f"{self.name}: argument {i} was not recorded")
        if entry == dt.TENSOR_LIST and unrecorded_dtype is not None:
            entry = unrecorded_dtype
        names = list(entry) if isinstance(entry, tuple) else [entry] * len(shapes)
        if len(names) != len(shapes) or not all(dt.is_dtype_name(n) for n in names):
            raise Unmodelled(f"{self.name}: element dtypes of tensor list {i} are not recorded")
        return [Tensor(tuple(s), n) for s, n in zip(shapes, names)]

    def is_list_arg(self, i: int) -> bool:
        return i < len(self.shapes) and isinstance(self.shapes[i], (list, tuple)) and bool(
            self.shapes[i]) and all(isinstance(s, (list, tuple)) for s in self.shapes[i])

    # -- concrete values -----------------------------------------------------------------
    def _text(self, i: int) -> str:
        text = self.concrete[i].strip() if i < len(self.concrete) else ""
        self.reads[i] = text
        return text

    def _value(self, i: int, default: Any) -> Any:
        text = self._text(i)
        if text in ("", "None"):
            if default is _MISSING:
                raise Unmodelled(f"{self.name}: value of argument {i} is not recorded")
            return default
        if text in ("True", "False"):
            return text == "True"
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            pass
        try:
            return float(text)  # "inf", "nan"
        except ValueError:
            return text  # e.g. an unquoted string such as "tanh"

    def int_at(self, i: int, default: Any = _MISSING) -> int:
        value = self._value(i, default)
        if isinstance(value, bool) or not isinstance(value, int):
            if value is default:
                return value
            raise Unmodelled(f"{self.name}: argument {i} is not an int: {value!r}")
        return value

    def ints_at(self, i: int, default: Any = _MISSING) -> tuple[int, ...] | Any:
        value = self._value(i, default)
        if value is default:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return (value,)
        if isinstance(value, (list, tuple)) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value):
            return tuple(value)
        raise Unmodelled(f"{self.name}: argument {i} is not an int list: {value!r}")

    def bools_at(self, i: int, default: Any = _MISSING) -> tuple[bool, ...] | Any:
        """A bool[N] argument such as output_mask; N is the length of `default`."""
        value = self._value(i, default)
        if isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value):
            if default is not _MISSING and len(value) != len(default):
                raise Unmodelled(f"{self.name}: argument {i} should hold {len(default)} flags")
            return tuple(value)
        if value is default:
            return value
        raise Unmodelled(f"{self.name}: argument {i} is not a bool list: {value!r}")

    def bool_at(self, i: int, default: Any = _MISSING) -> bool:
        value = self._value(i, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if value is default:
            return value
        raise Unmodelled(f"{self.name}: argument {i} is not a bool: {value!r}")

    def floats_at(self, i: int, default: Any = _MISSING) -> tuple[float, ...] | Any:
        """A float[] argument such as scale_factors ("[2., 2.]"); one number is one element."""
        value = self._value(i, default)
        if value is default:
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return (float(value),)
        if isinstance(value, (list, tuple)) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return tuple(float(v) for v in value)
        raise Unmodelled(f"{self.name}: argument {i} is not a float list: {value!r}")

    def text_at(self, i: int, default: Any = _MISSING) -> str:
        """A str argument (an einsum equation, a reduce mode), as recorded."""
        text = self._text(i)
        if not text or text == "None":
            if default is _MISSING:
                raise Unmodelled(f"{self.name}: value of argument {i} is not recorded")
            return default
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
            return text[1:-1]
        return text

    def float_at(self, i: int, default: Any = _MISSING) -> float:
        value = self._value(i, default)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if value is default:
            return value
        raise Unmodelled(f"{self.name}: argument {i} is not a number: {value!r}")

    def dtype_code_at(self, i: int) -> str | None:
        """A ScalarType argument (recorded as its enum value); None when absent."""
        code = self.int_at(i, None) if i < len(self.concrete) else None
        if code is None:
            return None
        name = dt.dtype_from_code(code)
        if name is None:
            raise Unmodelled(f"{self.name}: unknown ScalarType code {code}")
        return name

    def scalar_category(self, i: int) -> int:
        """Promotion category of a Scalar argument from its recorded text (float if unknown)."""
        text = self.concrete[i].strip() if i < len(self.concrete) else ""
        if text in ("True", "False"):
            category = 0
        elif text.lstrip("-").isdigit():
            category = 1
        else:
            category = 3 if text.endswith("j") else 2
        self.reads.setdefault(i, f"<scalar category {category}>")
        return category

    def arg_count(self) -> int:
        return len(self.shapes)

    def is_scalar(self, i: int) -> bool:
        return i < len(self.dtypes) and self.dtypes[i] == dt.SCALAR
