#!/usr/bin/env python3
"""rl.data.load on .parquet files (issue 35): the rows of a file written by pyarrow and by
pandas (df.to_parquet) equal those of the same rows as JSONL, for every option downstream
(input/label/metadata/tool keys, `path@[a:b]` slices, shuffle, the chat template,
skip_bad_rows). The files have several row groups, nested columns (a list of chat messages
as the prompt, a struct of metadata with a list inside) and nulls.

Bad files are clear errors naming the file (and the column), with a hint, never a crash:
not Parquet, empty, truncated, damaged pages, a missing column, a column of a type with no
JSON-like value, a prompt column that is neither text nor a list.

Needs pyarrow and pandas in python3 (scripts/bootstrap.sh installs pyarrow: it is also
where the build finds Arrow C++) and an rlhost built with the Parquet reader; without
them the tests skip, and under CI=true they fail.

    RLHOST_BIN=build/rlhost python3 tests/e2e/test_data_parquet.py
"""
import json
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import BIN, TEST_DATA, RlhostTestCase, lua_json, missing  # noqa: E402
import support  # noqa: E402

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pandas as pd
except ImportError:  # pragma: no cover - depends on the machine
    pa = pq = pd = None

PEER_HINT = "pip install pyarrow==26.0.1 pandas, or scripts/bootstrap.sh"
MODULE = os.path.join(os.path.dirname(BIN), "librlhost_parquet.so")

# Loads arg[1] with the options in arg[2] (JSON); prints the prompts, the first epoch's
# order and the skip count, or the error.
LOAD = r"""
local rl = require "rl"
local opts = rl.json.decode(arg[2])
if opts.chat_template then opts.chat_template = nil; opts.apply_chat_template = true
  opts.tokenizer = assert(rl.tokenizer.load(arg[3])) end
local ok, ds = pcall(rl.data.load, arg[1], opts)
if not ok then print(rl.json.encode { error = tostring(ds) }) return end
local rows = {}
for i, p in ipairs(ds.prompts) do rows[i] = { prompt = p.prompt, label = p.label, metadata = p.metadata } end
local order = {}
for _, g in ipairs(ds:get_samples(ds:size())) do order[#order + 1] = g[1].prompt end
print(rl.json.encode { rows = rows, order = order, skipped = ds.skipped })
"""
# Only whether arg[1] loads: a damaged file may hold any bytes in its strings.
TRY = r"""
local rl = require "rl"
local ok, ds = pcall(rl.data.load, arg[1], { input_key = "messages" })
print(rl.json.encode(ok and { size = ds:size() } or { error = tostring(ds) }))
"""


def chat_rows(n=11, null_prompt=None):
    """Rows with a chat-message prompt, a struct of metadata, tools as JSON text, nulls."""
    rows = []
    for i in range(n):
        msgs = [{"role": "user", "content": "what is %d + %d?" % (i, i)}]
        if i % 3:
            msgs.insert(0, {"role": "system", "content": "answer with a number"})
        rows.append({
            "messages": None if i == null_prompt else msgs,
            "answer": None if i == 4 else str(2 * i),
            "info": {"id": i, "tags": ["t%d" % k for k in range(i % 3)], "source": None if i % 2 else "gen",
                     "score": i / 4, "ok": i % 2 == 0},
            "tools": None if i % 2 else json.dumps([{"type": "function", "function": {"name": "calc"}}]),
            "extra": i,
        })
    return rows


def plain_rows(n=9):
    """Rows as pandas users write them: a text prompt, an integer label, a dict of metadata."""
    return [{"question": "q%d: %s" % (i, "x" * i), "label": i * 7, "metadata": {"level": i % 4, "name": "p%d" % i}}
            for i in range(n)]


class ParquetData(RlhostTestCase):
    tmp_prefix = "rlhost-parquet-"

    def setUp(self):
        super().setUp()
        if pa is None:
            missing("pyarrow and pandas in python3", PEER_HINT)
        if not os.path.exists(MODULE):
            missing("the Parquet reader (%s)" % MODULE,
                    "rlhost was configured without Arrow C++: run scripts/bootstrap.sh, then reconfigure and rebuild")
        self.script = self.write("load.lua", LOAD)
        self.try_script = self.write("try.lua", TRY)

    def jsonl(self, name, rows):
        return self.write(name, "".join(json.dumps(r) + "\n" for r in rows))

    def load(self, spec, **opts):
        extra = [os.path.join(TEST_DATA, "tokenizers", "qwen")] if opts.get("chat_template") else []
        return lua_json(self, self.script, spec, json.dumps(opts), *extra)

    def same(self, jsonl, parquet, **opts):
        a, b = self.load(jsonl, **opts), self.load(parquet, **opts)
        self.assertNotIn("error", a, a)
        self.assertEqual(a, b, "options %r" % opts)
        return b

    def assert_downstream_same(self, jl, pqf, keys):
        """Every option downstream of the reader gives the same prompts for both files."""
        out = self.same(jl, pqf, **keys)
        self.same(jl + "@[2:-3]", pqf + "@[2:-3]", **keys)
        self.same(jl, pqf, shuffle=True, seed=7, **keys)
        # tools stay out of the rendered prompts: the chat template writes a tool's keys in
        # Lua's table order, which is not the same from one process to the next
        self.same(jl, pqf, chat_template=True, **dict(keys, tool_key="no_such_column"))
        return out

    def test_pyarrow_file_equals_jsonl(self):
        rows = chat_rows()
        jl = self.jsonl("chat.jsonl", rows)
        path = os.path.join(self.dir, "chat.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
        self.assertEqual(pq.ParquetFile(path).num_row_groups, 4)
        keys = {"input_key": "messages", "label_key": "answer", "metadata_key": "info", "tool_key": "tools"}
        out = self.assert_downstream_same(jl, path, keys)
        self.assertEqual(len(out["rows"]), 11)
        first = out["rows"][1]
        self.assertEqual(first["prompt"][0], {"role": "system", "content": "answer with a number"})
        self.assertEqual(first["metadata"]["tags"], ["t0"])
        self.assertNotIn("tools", first["metadata"])  # a null tools cell adds none
        self.assertEqual(out["rows"][0]["metadata"]["tools"][0]["function"]["name"], "calc")
        self.assertNotIn("label", out["rows"][4])  # a null label is no label

    def test_pandas_file_equals_jsonl(self):
        rows = plain_rows()
        jl = self.jsonl("plain.jsonl", rows)
        path = os.path.join(self.dir, "plain.parquet")
        pd.DataFrame(rows).to_parquet(path, row_group_size=2)
        self.assertGreater(pq.ParquetFile(path).num_row_groups, 1)
        out = self.assert_downstream_same(jl, path, {"input_key": "question", "label_key": "label"})
        self.assertEqual(out["rows"][3], {"prompt": "q3: xxx", "label": 21, "metadata": {"level": 3, "name": "p3"}})
        # chat rows through pandas too (list of dicts -> list<struct>, dicts -> struct)
        crows = chat_rows(7)
        cjl = self.jsonl("chat.jsonl", crows)
        cpath = os.path.join(self.dir, "chat.parquet")
        pd.DataFrame(crows).to_parquet(cpath, row_group_size=3)
        self.assert_downstream_same(cjl, cpath, {"input_key": "messages", "label_key": "answer",
                                                 "metadata_key": "info"})

    def test_null_prompt_is_a_bad_row(self):
        rows = chat_rows(8, null_prompt=5)
        jl = self.jsonl("nulls.jsonl", rows)
        path = os.path.join(self.dir, "nulls.parquet")
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)
        err = self.load(path, input_key="messages")["error"]
        self.assertIn("nulls.parquet:6: no 'messages' field", err)
        out = self.same(jl, path, input_key="messages", skip_bad_rows=True)
        self.assertEqual(out["skipped"], 1)
        self.assertEqual(len(out["rows"]), 7)

    def test_bad_files_are_clear_errors(self):
        rows = chat_rows(40)
        good = os.path.join(self.dir, "good.parquet")
        pq.write_table(pa.Table.from_pylist(rows), good, row_group_size=5)
        with open(good, "rb") as f:
            data = f.read()

        def err_of(name, content=None, **opts):
            path = os.path.join(self.dir, name)
            if content is not None:
                with open(path, "wb") as f:
                    f.write(content)
            out = self.load(path, **(opts or {"input_key": "messages"}))
            self.assertIn("error", out, "%s loaded: %r" % (name, out))
            self.assertIn(path, out["error"])
            self.assertNotIn("stack traceback", out["error"])
            return out["error"]

        self.assertIn("not a readable Parquet file", err_of("text.parquet", b"question,answer\n1+1,2\n"))
        self.assertIn("Parquet file size is 0 bytes", err_of("empty.parquet", b""))
        e = err_of("half.parquet", data[: len(data) // 2])
        self.assertIn("not a readable Parquet file", e)
        self.assertIn("hint: check it with: python3 -c", e)
        self.assertIn("cannot open", err_of("absent.parquet"))
        e = err_of("good.parquet", input_key="question")
        self.assertIn("no column 'question' (columns: messages, answer, info, tools, extra)", e)
        self.assertIn("hint: set input_key (--input-key)", e)
        self.assertIn("no column 'label'", err_of("good.parquet", input_key="messages", label_key="label"))
        self.assertIn("column 'extra' has type int64; a prompt is text or a list of chat messages",
                      err_of("good.parquet", input_key="extra"))
        odd = os.path.join(self.dir, "odd.parquet")
        pq.write_table(pa.table({"q": ["a", "b"], "metadata": pa.array([1, 2], pa.duration("s"))}), odd)
        e = err_of("odd.parquet", input_key="q")
        self.assertIn("column 'metadata' has type duration[s]", e)
        self.assertIn("no JSON-like value", e)
        # damaged bytes in the pages and footer: an error or a (partial) read, never a crash
        rnd = random.Random(35)
        for n in range(60):
            b = bytearray(data)
            for _ in range(rnd.randint(1, 6)):
                b[rnd.randrange(4, len(b) - 8)] = rnd.randrange(256)
            path = os.path.join(self.dir, "damaged%d.parquet" % n)
            with open(path, "wb") as f:
                f.write(b)
            out = lua_json(self, self.try_script, path)
            if "error" in out:
                self.assertIn("rl.data.load: " + path, out["error"])


class WithoutReader(RlhostTestCase):
    """Runs with or without Arrow: a binary that finds no Parquet module says how to get one."""
    tmp_prefix = "rlhost-parquet-"

    def test_the_error_says_how_to_get_the_reader(self):
        path = self.write("x.parquet", "not read: the module is missing first")
        # package.cpath without the module folder: as a build configured without Arrow
        script = self.write("nomod.lua", 'package.cpath = ""\nlocal rl = require "rl"\n'
                                         'local ok, err = pcall(rl.data.load, arg[1])\n'
                                         'print(rl.json.encode { error = tostring(err) })\n')
        err = lua_json(self, script, path)["error"]
        self.assertIn(path + ": this rlhost was built without the Parquet reader", err)
        self.assertIn("scripts/bootstrap.sh", err)


if __name__ == "__main__":
    support.main()
