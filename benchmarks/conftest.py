import pytest


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true", help="fewer and shorter points (a few minutes)")
    parser.addoption("--skip-anchors", action="store_true", help="no optimum / CTranslate2 (their environment)")


@pytest.fixture(scope="session")
def quick(request) -> bool:
    return request.config.getoption("--quick")


@pytest.fixture(scope="session")
def bart_base():
    from benchmarks.common import bart_base_pagesum

    return bart_base_pagesum()
