"""fit-many on images behind URLs: a folder served over http (a local http.server on 127.0.0.1, in
a thread) is listed with the names, labels and so seeds of the same folder on disk, and fitted into
the same networks; a list of URLs likewise; a set written to a URL loads."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading

import numpy as np
import pytest

import inr_cli
from inr_cli.formats.network_set import DESCRIPTION, INDEX, PLAN, WEIGHTS
from inr_cli.sets import inputs
from tests import test_fit_many
from tests.test_fit_many import NET, fit, make_folder

reference = test_fit_many.reference  # the in-process set every run here must reproduce, bit for bit


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output is for the test
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory, reference):
    """The reference images and a labelled folder, served at http://127.0.0.1:PORT/."""
    pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp", reason="fsspec's http file system needs aiohttp (the 'remote' extra)")
    root = tmp_path_factory.mktemp("served")
    folder, _ = reference
    shutil.copytree(folder, root / "images")
    make_folder(root / "shapes" / "circle", 2)
    make_folder(root / "shapes" / "square", 2)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=root))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_http_folder_is_listed_as_the_folder_on_disk(served):
    root, url = served
    listed = inputs.list_inputs(f"{url}/shapes/")
    on_disk = inputs.list_inputs(str(root / "shapes"))
    assert [(item.name, item.label) for item in listed] == [(item.name, item.label) for item in on_disk]
    assert [item.location for item in listed] == [f"{url}/shapes/{item.name}" for item in on_disk]


def test_a_list_of_urls_is_named_below_their_common_folder(served, tmp_path):
    root, url = served
    listing = tmp_path / "images.txt"
    listing.write_text("".join(f"{url}/shapes/{name}\n" for name in ("square/img1.png", "circle/img0.png")))
    listed = inputs.list_inputs(str(listing))
    assert [(item.name, item.label) for item in listed] == [("circle/img0.png", "circle"),
                                                            ("square/img1.png", "square")]


def test_an_http_folder_fits_the_same_networks(served, reference, tmp_path):
    """Same names, so the same seeds: the set fitted from the URL is the one fitted from disk."""
    _, url = served
    _, out = reference
    result = fit(f"{url}/images/", "-o", tmp_path / "set", "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))
    assert (tmp_path / "set" / INDEX).read_text() == (out / INDEX).read_text()


def test_a_list_of_urls_fits_the_same_networks(served, reference, tmp_path):
    root, url = served
    _, out = reference
    listing = tmp_path / "images.txt"
    listing.write_text("".join(f"{url}/images/{path.name}\n" for path in sorted((root / "images").iterdir())))
    result = fit(listing, "-o", tmp_path / "set", "--pack", "2", *NET)
    assert result.exit_code == 0, result.output
    assert np.array_equal(np.load(tmp_path / "set" / WEIGHTS), np.load(out / WEIGHTS))


def test_when_no_image_can_be_read_skipping_is_not_suggested(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(2):
        (folder / f"note{i}.txt").write_text("not an image")
    result = fit(folder, "-o", tmp_path / "set", *NET)
    assert result.exit_code == 1
    assert "none of the 2 images can be read" in result.output and "--skip-unreadable" not in result.output


def test_a_set_at_a_url_loads(reference):
    _, out = reference
    memory = pytest.importorskip("fsspec").filesystem("memory")
    for name in (PLAN, DESCRIPTION, INDEX, WEIGHTS):
        memory.pipe(f"/inr-loaded/{name}", (out / name).read_bytes())
    try:
        loaded = inr_cli.load("memory://inr-loaded")
        local = inr_cli.load(out)
        assert loaded.names == local.names and np.array_equal(loaded.weights, local.weights)
        assert "memory://inr-loaded" in repr(loaded)
    finally:
        memory.rm("/inr-loaded", recursive=True)
    with pytest.raises(inr_cli.InrError, match="no inr fit-many set"):
        inr_cli.load("memory://nothing-here")


def test_a_folder_url_that_cannot_be_listed_says_why(served):
    """Not 'no images to fit': fsspec's listing leaves out what it could not reach, the root too."""
    import socket

    from inr_cli.errors import InrError

    _, url = served
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(InrError, match=r"^http://127\.0\.0\.1:\d+/images/: cannot list \(.*connect"):
        inputs.list_inputs(f"http://127.0.0.1:{port}/images/")
    with pytest.raises(InrError, match=r"/nothing/: cannot list"):
        inputs.list_inputs(f"{url}/nothing/")
