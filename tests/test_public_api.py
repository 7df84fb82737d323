"""The public API: wire types from litehit_service.messages, domain types and the client
from litehit_service; nothing a user needs lives only in the private _proto package."""

from __future__ import annotations

import importlib
from pathlib import Path

import litehit_service
from litehit_service import messages

ROOT = Path(__file__).resolve().parents[1]


def test_messages_exports_every_message_enum_and_value_of_the_proto() -> None:
    descriptor = messages.FILE_DESCRIPTOR
    expected = set(descriptor.message_types_by_name) | set(descriptor.enum_types_by_name)
    for enum in descriptor.enum_types_by_name.values():
        expected |= {value.name for value in enum.values}
    missing = sorted(name for name in expected if name not in messages.__all__)
    assert missing == [], f"add to litehit_service/messages.py: {missing}"
    for name in expected:
        assert getattr(messages, name) is not None
    assert messages.TraceQueryRequest.DESCRIPTOR.full_name == (
        "kv_cache_manager.proto.optimizer.TraceQueryRequest"
    )
    assert messages.SERVICE_NAME == "kv_cache_manager.proto.optimizer.OptimizerService"


def test_package_exports_resolve() -> None:
    for name in litehit_service.__all__:
        assert getattr(litehit_service, name).__name__ == name
    assert (
        litehit_service.OptimizerClient
        is importlib.import_module("litehit_service.client").OptimizerClient
    )


def test_only_messages_imports_the_generated_code() -> None:
    users = [
        str(path.relative_to(ROOT))
        for folder in ("litehit_service", "litehit_core", "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if "_proto" not in path.parts
        and path.name not in ("messages.py", "test_proto.py", "test_public_api.py")
        and "litehit_service._proto" in path.read_text(encoding="utf-8")
    ]
    assert users == []
    from doc_pages import all_text

    assert "litehit_service._proto" not in all_text()
