"""An output path that names a device node, a FIFO or a link to one is never replaced.

Writing the run's file over such a path would put a regular file in the node's place (as root,
``-o /dev/null --overwrite`` would break the host): the CLI refuses it in one line, exit 2, with
or without ``--overwrite`` (and without suggesting that flag); the writer refuses it for the
Python API, before it creates its lock file beside the node.
"""

from __future__ import annotations

import os
import stat

import pytest
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.lock import NotRegularFile

SMALL = ["--set", "task.n_tasks=10", "--set", "output.track=[1,2]", "--quiet"]


def _fifo(tmp_path):
    node = tmp_path / "fifo"
    os.mkfifo(node)
    return node, stat.S_ISFIFO, "a FIFO"


def _link_to_dev_null(tmp_path):
    node = tmp_path / "null-link"
    node.symlink_to("/dev/null")
    return node, stat.S_ISCHR, "a character device"


def _char_device(tmp_path):  # a private copy of /dev/null's node (1, 3): needs root
    node = tmp_path / "null"
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return node, stat.S_ISCHR, "a character device"


NODES = [_fifo, _link_to_dev_null] + ([_char_device] if os.geteuid() == 0 else [])


def _untouched(node, is_kind, before):
    st = os.stat(node)
    assert is_kind(st.st_mode) and (st.st_dev, st.st_ino) == before
    assert [p.name for p in node.parent.iterdir()] == [node.name]  # no lock, no temporary file


@pytest.mark.parametrize("make", NODES, ids=lambda f: f.__name__.lstrip("_"))
@pytest.mark.parametrize("flags", [[], ["--overwrite"]], ids=["plain", "overwrite"])
def test_the_cli_refuses_a_node_in_one_line(make, flags, tmp_path):
    node, is_kind, kind = make(tmp_path)
    before = (os.stat(node).st_dev, os.stat(node).st_ino)
    res = CliRunner().invoke(main, ["simulate", *SMALL, "-o", str(node), *flags])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"is {kind}, not a regular file" in lines[0], res.output
    assert "--overwrite" not in lines[0]
    _untouched(node, is_kind, before)


@pytest.mark.parametrize("model", ["msfr", "attn-m"])
@pytest.mark.parametrize("make", NODES, ids=lambda f: f.__name__.lstrip("_"))
def test_the_writer_refuses_a_node_for_the_python_api(model, make, tmp_path):
    node, is_kind, kind = make(tmp_path)
    before = (os.stat(node).st_dev, os.stat(node).st_ino)
    sets = ["task.n_tasks=10", "output.track=[1,2]"] if model == "msfr" else []
    cfg = fastdyn.load_config(None, [f'model="{model}"', *sets])
    with pytest.raises(NotRegularFile, match=f"is {kind}, not a regular file"):
        fastdyn.simulate(cfg, node)
    _untouched(node, is_kind, before)


def test_a_regular_file_is_still_replaced_with_the_flag(tmp_path):
    out = tmp_path / "o.h5"
    out.write_bytes(b"old")
    res = CliRunner().invoke(main, ["simulate", *SMALL, "-o", str(out), "--overwrite"])
    assert res.exit_code == 0, res.output
    assert fastdyn.load(out)["loss/test"].shape[0] > 1


def test_a_trailing_slash_is_a_directory_name_not_a_file(tmp_path):
    res = CliRunner().invoke(main, ["simulate", *SMALL, "-o", f"{tmp_path}/new/"])
    assert res.exit_code == 2 and "names a directory; give a file name" in res.output
    assert list(tmp_path.iterdir()) == []


def test_a_name_that_is_not_utf8_is_one_line(tmp_path):
    name = os.fsdecode(b"a\xff.h5")
    res = CliRunner().invoke(main, ["simulate", *SMALL, "-o", str(tmp_path / name)])
    assert res.exit_code == 2 and "the name is not valid UTF-8" in res.output, res.output
    assert list(tmp_path.iterdir()) == []


def test_a_name_too_long_for_the_files_beside_it_is_one_line(tmp_path):
    res = CliRunner().invoke(main, ["simulate", *SMALL, "-o", str(tmp_path / ("x" * 250 + ".h5"))])
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "the file name is 253 bytes" in lines[0]
    assert list(tmp_path.iterdir()) == []
