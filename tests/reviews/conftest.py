from tests.policies.conftest import failed_trace, make_strategy  # noqa: F401
