"""Root attributes carry a checksum (issue 22, item 6): one changed character in the stored config
of a killed file (seed = 3 → 2) used to make ``--resume`` finish "complete" with different data;
now ``--resume`` and ``inspect`` refuse the file with one line, exit 2."""

from __future__ import annotations

import h5py
from click.testing import CliRunner

import fastdyn
from fastdyn.cli import main
from fastdyn.h5.writer import identity_crc


def _one_line_exit_2(res, needle: str) -> None:
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.output, res.output


def test_a_changed_config_or_seed_is_refused(msfr_reference, tmp_path):
    ref_path, _ = msfr_reference
    with h5py.File(ref_path, "r") as f:
        assert int(f.attrs["identity_crc32"]) == identity_crc(f.attrs)
    for key, edit in (
        ("config", lambda v: v.replace("seed = 0", "seed = 1", 1)),
        ("seed", lambda v: int(v) + 1),
    ):
        p = tmp_path / f"{key}.h5"
        p.write_bytes(ref_path.read_bytes())
        with h5py.File(p, "r+") as f:
            f.attrs["status"] = "running"  # as a killed file
            old = f.attrs[key]
            f.attrs[key] = edit(old.decode() if isinstance(old, bytes) else old)
            assert f.attrs[key] != old
        _one_line_exit_2(
            CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)]),
            "damaged root attributes",
        )
        _one_line_exit_2(CliRunner().invoke(main, ["inspect", str(p)]), "damaged root attributes")
    assert CliRunner().invoke(main, ["inspect", str(ref_path)]).exit_code == 0
    assert fastdyn.load(ref_path).status == "complete"


def test_a_deleted_identity_checksum_is_refused(msfr_reference, tmp_path):
    """A file that carried ``identity_crc32`` and lost it (with or without a changed config)."""
    ref_path, _ = msfr_reference
    for change in (False, True):
        p = tmp_path / f"gone-{change}.h5"
        p.write_bytes(ref_path.read_bytes())
        with h5py.File(p, "r+") as f:
            f.attrs["status"] = "running"  # as a killed file
            del f.attrs["identity_crc32"]
            if change:
                f.attrs["seed"] = int(f.attrs["seed"]) + 1
        for args in (["-q", "simulate", "--resume", str(p)], ["inspect", str(p)]):
            _one_line_exit_2(CliRunner().invoke(main, args), "identity_crc32 is missing")


def test_a_file_stripped_of_all_identity_evidence_is_not_resumed(msfr_reference, tmp_path):
    """Both ``identity_crc32`` and ``checksums`` deleted and the config edited: without either
    there is no evidence that the rows came from the stored config, so ``--resume`` refuses (it
    used to finish "complete" with rows of two configs); reading the file still works."""
    ref_path, _ = msfr_reference
    p = tmp_path / "stripped.h5"
    p.write_bytes(ref_path.read_bytes())
    with h5py.File(p, "r+") as f:
        f.attrs["status"] = "running"  # as a killed file
        del f.attrs["identity_crc32"], f.attrs["checksums"]
        f.attrs["config"] = f.attrs["config"].replace("seed = 0", "seed = 1", 1)
    before = p.read_bytes()
    _one_line_exit_2(
        CliRunner().invoke(main, ["-q", "simulate", "--resume", str(p)]),
        "no identity checksum (root attribute identity_crc32)",
    )
    assert p.read_bytes() == before
