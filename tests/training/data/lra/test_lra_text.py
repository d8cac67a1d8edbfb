"""LRA text tasks (byte level): IMDB aclImdb folders and AAN TSV files → ids → one-hot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from liquid_stream.training.data.lra import lra_text as lt


def ids_of(raw: bytes) -> list[int]:
    return [b + 1 for b in raw]


def raw_of(ids: np.ndarray) -> bytes:
    """Bytes back from ids (id - 1)."""
    return bytes((ids - 1).tolist())


def decode(x: torch.Tensor) -> bytes:
    """Bytes back from one-hot rows (argmax ids, padding id 0 dropped)."""
    return bytes(i - 1 for i in x.argmax(-1).tolist() if i > 0)


def test_encode_bytes():
    assert lt.encode_bytes("A", 10).tolist() == [66]
    assert lt.encode_bytes("é", 10).tolist() == [0xC3 + 1, 0xA9 + 1]  # two UTF-8 bytes
    assert lt.encode_bytes(b"\x00\xff", 10).tolist() == [1, 256]  # the full id range
    ids = lt.encode_bytes("abcdef", 4)
    assert ids.dtype == np.int64 and ids.tolist() == ids_of(b"abcd")
    assert lt.encode_bytes("", 4).tolist() == []
    with pytest.raises(ValueError, match="max_length"):
        lt.encode_bytes("a", 0)


def test_token_sequences_are_compact_and_index_like_a_list():
    docs = [b"ab", b"", b"\xffz"]
    seqs = lt.TokenSequences.from_bytes(docs)
    assert len(seqs) == 3 and seqs.data.dtype == np.uint8 and seqs.lengths.tolist() == [2, 0, 2]
    assert [s.tolist() for s in seqs] == [ids_of(d) for d in docs]
    assert seqs[-1].dtype == np.int64 and seqs[-1].tolist() == [256, ord("z") + 1]
    assert [seqs.raw(i) for i in range(3)] == docs
    assert [s.tolist() for s in seqs[1:]] == [[], ids_of(b"\xffz")]
    assert [seqs.take([2, 0]).raw(i) for i in range(2)] == [b"\xffz", b"ab"]
    picked = seqs[np.array([2, -3])]  # an index array, as for the label array beside it
    assert isinstance(picked, lt.TokenSequences)
    assert [picked.raw(i) for i in range(2)] == [b"\xffz", b"ab"]
    masked = seqs[np.array([False, True, True])]
    assert [masked.raw(i) for i in range(2)] == [b"", b"\xffz"]
    with pytest.raises(IndexError):
        seqs[3]


IMDB = {
    "train": [
        ("A great film.<br /><br />Loved it.", 1),
        ("Dull. é and ü", 0),
        (b"raw bytes \xff\xfe not UTF-8", 1),
        ("x" * 5000, 0),
    ],
    "test": [("Fine.", 1), ("Bad.", 0)],
}


def test_imdb_round_trip(tmp_path):
    folder = lt.write_imdb(tmp_path, IMDB)
    assert folder == tmp_path / "aclImdb"
    names = sorted(p.name for p in (folder / "train" / "pos").iterdir())
    assert names == ["0_7.txt", "1_8.txt"]  # <id>_<rating>, pos ratings 7–10
    assert sorted(p.name for p in (folder / "train" / "neg").iterdir()) == ["0_1.txt", "1_2.txt"]
    # entries of the real archive that are not labelled reviews are ignored
    (folder / "train" / "unsup").mkdir()
    (folder / "train" / "unsup" / "0_0.txt").write_text("unlabelled")
    (folder / "train" / "urls_pos.txt").write_text("http://…")
    (folder / "train" / "labeledBow.feat").write_text("0 1:1")

    for root in (tmp_path, folder):  # the aclImdb folder or its parent
        data = lt.read_imdb(root, max_length=4096)
        assert set(data) == {"train", "val", "test"} and data["val"] is data["test"]
        for split, items in IMDB.items():
            xs, ys = data[split]
            # order: neg, then pos, each in file-id order
            expect = [it for it in items if it[1] == 0] + [it for it in items if it[1] == 1]
            assert ys.dtype == np.int64 and ys.tolist() == [y for _, y in expect]
            for x, (text, _) in zip(xs, expect, strict=True):
                raw = text.encode() if isinstance(text, str) else text
                assert x.dtype == np.int64 and x.tolist() == ids_of(raw[:4096])
    assert len(data["train"][0][1]) == 4096  # the 5000-byte review, truncated


def test_imdb_label_comes_from_the_folder(tmp_path):
    folder = lt.write_imdb(tmp_path, {"train": [("one", 1), ("two", 0)], "test": IMDB["test"]})
    (folder / "train" / "neg" / "0_1.txt").rename(folder / "train" / "pos" / "7_3.txt")
    (folder / "train" / "neg" / "5_2.txt").write_text("other")
    (folder / "train" / "neg" / "12_4.txt").write_text("later")  # ids sort as numbers
    xs, ys = lt.read_imdb(tmp_path)["train"]
    assert [raw_of(x) for x in xs] == [b"other", b"later", b"one", b"two"]
    assert ys.tolist() == [0, 0, 1, 1]


def test_imdb_val_fraction_holds_out_part_of_train(tmp_path):
    items = [(f"review {i}", i % 2) for i in range(40)]
    lt.write_imdb(tmp_path, {"train": items, "test": IMDB["test"]})
    full = lt.read_imdb(tmp_path)
    split = lt.read_imdb(tmp_path, val_fraction=0.25, seed=3)
    train = {full["train"][0].raw(i) for i in range(40)}
    got_train = {split["train"][0].raw(i) for i in range(30)}
    got_val = {split["val"][0].raw(i) for i in range(10)}
    assert len(split["train"][0]) == 30 and len(split["val"][0]) == 10
    assert got_train | got_val == train and not got_train & got_val
    for xs, ys in (split["train"], split["val"]):  # labels follow their reviews
        assert [int(xs.raw(i).split()[1]) % 2 for i in range(len(xs))] == ys.tolist()
    again = lt.read_imdb(tmp_path, val_fraction=0.25, seed=3)
    assert list(map(again["val"][0].raw, range(10))) == list(map(split["val"][0].raw, range(10)))
    with pytest.raises(ValueError, match="val_fraction"):
        lt.read_imdb(tmp_path, val_fraction=1.0)


AAN = {
    "train": [
        (1, "P01-1001", "P02-2002", 'He said "yes", then left, 50% done', "a, b, \"c\" 'd'"),
        (0, "X", "Y", '"starts with a quote', 'ends with a quote"'),
    ],
    "val": [(1, "E1", "E2", "from the eval file é", "second")],
    "test": [(0, "T1", "T2", "test one", "test two"), (1, "T3", "T4", "t3", "t4")],
}


def test_aan_round_trip(tmp_path):
    tsv = tmp_path / "lra_release" / "tsv_data"
    assert lt.write_aan(tsv, AAN) == tsv
    assert sorted(p.name for p in tsv.iterdir()) == sorted(lt.AAN_FILES.values())  # no .tmp
    first = (tsv / "new_aan_pairs.train.tsv").read_text().splitlines()[0]
    assert first.split("\t")[:3] == ["1.0", "P01-1001", "P02-2002"]  # float labels
    for root in (tmp_path, tmp_path / "lra_release", tsv):
        data = lt.read_aan(root)
        assert set(data) == {"train", "val", "test"}
        for split, rows in AAN.items():
            xs1, xs2, ys = data[split]
            assert ys.dtype == np.int64 and ys.tolist() == [r[0] for r in rows]
            assert [raw_of(x).decode() for x in xs1] == [r[3] for r in rows]
            assert [raw_of(x).decode() for x in xs2] == [r[4] for r in rows]
    assert raw_of(data["val"][0][0]).decode() == "from the eval file é"


def test_aan_reads_integer_labels_long_documents_and_blank_lines(tmp_path):
    long1, long2 = "a" * 200_000, "b" * 3  # far over csv's default field size limit
    for name in lt.AAN_FILES.values():
        (tmp_path / name).write_bytes(
            f"1\tA\tB\t{long1}\t{long2}\n0\tC\tD\tx\xff\ty\n\n".encode("latin-1")
        )
    xs1, xs2, ys = lt.read_aan(tmp_path, max_length=4000)["test"]
    assert ys.tolist() == [1, 0]
    assert xs1.lengths.tolist() == [4000, 2] and xs2.raw(0) == b"bbb"
    assert xs1.raw(1) == b"x\xff"  # raw bytes, never decoded


@pytest.mark.parametrize(
    "line,match",
    [
        ("1.0\tA\tB\tonly four", r"new_aan_pairs.train.tsv:2: 4 columns, expected 5"),
        ("2\tA\tB\tx\ty", r"new_aan_pairs.train.tsv:2: label '2' is not 0 or 1"),
        ("x\tA\tB\tx\ty", r"new_aan_pairs.train.tsv:2: label b'x' is not a number"),
        ("0.5\tA\tB\tx\ty", r":2: label '0.5' is not 0 or 1"),
    ],
)
def test_aan_bad_lines(tmp_path, line, match):
    lt.write_aan(tmp_path, AAN)
    path = tmp_path / "new_aan_pairs.train.tsv"
    path.write_text(f"1.0\tA\tB\tfine\tfine\n{line}\n")
    with pytest.raises(lt.TextDataError, match=match):
        lt.read_aan(tmp_path)


def test_aan_missing_and_empty_files(tmp_path):
    lt.write_aan(tmp_path, {"train": AAN["train"], "test": AAN["test"]})
    with pytest.raises(lt.TextDataError, match=r"missing new_aan_pairs\.eval\.tsv"):
        lt.read_aan(tmp_path)
    (tmp_path / "new_aan_pairs.eval.tsv").write_text("")
    with pytest.raises(lt.TextDataError, match=r"new_aan_pairs\.eval\.tsv: no examples"):
        lt.read_aan(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(lt.TextDataError, match="empty: no AAN files"):
        lt.read_aan(tmp_path / "empty")
    with pytest.raises(lt.TextDataError, match="no such folder"):
        lt.read_aan(tmp_path / "absent")
    with pytest.raises(ValueError, match="tab or newline"):
        lt.write_aan(tmp_path, {"train": [(1, "a", "b", "tab\there", "x")]})


def test_imdb_errors_name_the_folder(tmp_path):
    with pytest.raises(lt.TextDataError, match="absent: no such folder"):
        lt.read_imdb(tmp_path / "absent")
    with pytest.raises(lt.TextDataError, match="neither an aclImdb folder"):
        lt.read_imdb(tmp_path)
    folder = lt.write_imdb(tmp_path, {"train": IMDB["train"]})
    with pytest.raises(lt.TextDataError, match=r"aclImdb/test: missing split folder"):
        lt.read_imdb(tmp_path)
    lt.write_imdb(tmp_path, {"test": []})  # the folders, no reviews
    with pytest.raises(lt.TextDataError, match=r"aclImdb/test/neg: no \*\.txt reviews"):
        lt.read_imdb(folder)
    (folder / "test" / "neg" / "0_1.txt").write_text("bad")
    (folder / "test" / "pos").rmdir()
    with pytest.raises(lt.TextDataError, match=r"aclImdb/test/pos: missing folder"):
        lt.read_imdb(folder)


def test_token_dataset_one_hot(tmp_path):
    lt.write_imdb(tmp_path, IMDB)
    xs, ys = lt.read_imdb(tmp_path, max_length=64)["train"]
    ds = lt.TokenDataset(xs, ys, max_length=64)
    assert len(ds) == 4 and ds.targets == ys.tolist()
    for i in range(len(ds)):
        x, y = ds[i]
        assert x.shape == (64, lt.VOCAB_SIZE) and x.dtype == torch.float32 and y == ds.targets[i]
        assert torch.equal(x.sum(-1), torch.ones(64))
        n = len(xs[i])
        assert (x[n:].argmax(-1) == 0).all() and (x[:n].argmax(-1) > 0).all()
        assert decode(x) == xs.raw(i)
    assert decode(ds[0][0]) == "Dull. é and ü".encode()  # neg first


def test_pair_dataset_one_hot(tmp_path):
    lt.write_aan(tmp_path, AAN)
    xs1, xs2, ys = lt.read_aan(tmp_path, max_length=40)["train"]
    ds = lt.PairTokenDataset(xs1, xs2, ys, max_length=40)
    assert len(ds) == 2 and ds.targets == [1, 0]
    x, y = ds[0]
    assert x.shape == (2, 40, lt.VOCAB_SIZE) and x.dtype == torch.float32 and y == 1
    assert torch.equal(x.sum(-1), torch.ones(2, 40))
    assert decode(x[0]) == AAN["train"][0][3].encode()[:40]
    assert decode(x[1]) == AAN["train"][0][4].encode()
    assert (x[1, len(xs2[0]) :].argmax(-1) == 0).all()  # padding rows are id 0
    with pytest.raises(ValueError, match="labels"):
        lt.PairTokenDataset(xs1, xs2, ys[:1], max_length=40)


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    """Files are written through cache.atomic_file: a write that fails half-way (a bad
    label in its second row) leaves the previous file as it was and no temporary beside it."""
    good = {"train": [(1, "a", "b", "x", "y")]}
    lt.write_aan(tmp_path, good)
    before = (tmp_path / lt.AAN_FILES["train"]).read_bytes()
    with pytest.raises(ValueError, match="row 1: label 2"):
        lt.write_aan(tmp_path, {"train": [(0, "c", "d", "u", "v"), (2, "e", "f", "w", "z")]})
    assert (tmp_path / lt.AAN_FILES["train"]).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [lt.AAN_FILES["train"]]
