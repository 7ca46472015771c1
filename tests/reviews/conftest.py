from tests.policies.conftest import make_strategy  # noqa: F401
