"""The echo engine's test retires the scenario's vLLM: it runs after every other test of the
scenario."""


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: "test_echo_engine" in item.nodeid)
