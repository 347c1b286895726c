"""The ledger's check of an operator's output against a tool's recorded JSON schema."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel
from temporal_ledger.ledger._schema import describe_schema, output_problems, output_template


class Channel(StrEnum):
    MAIL = "mail"
    SMS = "sms"


class Line(BaseModel):
    text: str
    number: int


class Receipt(BaseModel):
    entry: int
    channel: Channel
    lines: list[Line]
    note: str | None = None
    amount: float = 0.0


SCHEMA = Receipt.model_json_schema()


def test_a_fitting_output_has_no_problems_and_agrees_with_pydantic() -> None:
    good = {"entry": 2, "channel": "mail", "lines": [{"text": "x", "number": 1}], "amount": 3}
    assert output_problems(SCHEMA, good) == []
    Receipt.model_validate(good)


def test_each_problem_names_the_field_and_the_expected_type() -> None:
    bad = {"entry": True, "channel": "fax", "lines": [{"text": 1}], "note": 5}
    assert output_problems(SCHEMA, bad) == [
        "entry: expected integer, got True",
        "channel: expected one of 'mail', 'sms', got 'fax'",
        "lines[0].number: missing (integer)",
        "lines[0].text: expected string, got 1",
        "note: expected string or null, got 5",
    ]
    assert (
        output_problems(SCHEMA, None)
        == output_problems(SCHEMA, {})
        == [
            "entry: missing (integer)",
            "channel: missing (one of 'mail', 'sms')",
            "lines: missing (list of object Line)",
        ]
    )


def test_the_template_has_every_field_and_fits_once_filled() -> None:
    shape = output_template(SCHEMA)
    assert set(shape) == {"entry", "channel", "lines", "note", "amount"}
    assert shape["channel"] == "<one of 'mail', 'sms'>" and shape["entry"] == "<integer>"
    assert shape["lines"] == [{"number": "<integer>", "text": "<string>"}]
    assert describe_schema(SCHEMA) == "object Receipt"
    filled = {
        **shape,
        "entry": 3,
        "channel": "sms",
        "lines": [{"number": 1, "text": "hi"}],
        "note": None,
        "amount": 2.5,
    }
    assert output_problems(SCHEMA, filled) == []


def test_a_template_sent_back_unchanged_is_refused_field_by_field() -> None:
    shape = output_template(SCHEMA)
    problems = output_problems(SCHEMA, shape)
    named = {problem.split(":", 1)[0] for problem in problems}
    assert {"entry", "channel", "lines[0].number", "lines[0].text", "note"} <= named
    assert any("still the template's placeholder '<string>'" in p for p in problems)


def test_a_union_misfit_names_the_field_of_the_option_plainly_meant() -> None:
    text = {
        "type": "object",
        "title": "Text",
        "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
        "required": ["type", "text"],
    }
    image = {
        "type": "object",
        "title": "Image",
        "properties": {"type": {"const": "image"}, "data": {"type": "string"}},
        "required": ["type", "data"],
    }
    blocks = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": [text, image]}}]}
    # By its type (a list, not a string), then by its tag ("text").
    assert output_problems(blocks, [{"type": "text"}]) == ["output[0].text: missing (string)"]
    # Among untagged objects, by the required fields it has.
    either = {
        "anyOf": [
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            {"type": "object", "properties": {"json": {}}, "required": ["json"]},
        ]
    }
    assert output_problems(either, {"text": 5}) == ["text: expected string, got 5"]
    # Nothing tells which was meant: every option is named, with the fields it needs.
    assert output_problems(either, {"kind": "text"}) == [
        "output: expected object with text or object with json, got {'kind': 'text'}"
    ]
    assert output_problems(blocks, 5) == [
        "output: expected string or list of object Text or object Image, got 5"
    ]
