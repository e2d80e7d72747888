"""Golden tests: real agent sessions in, the records a developer would want back out."""

from __future__ import annotations

from helpers.events import NAMESPACE
from hypothesis import given
from hypothesis import strategies as st

from kirolearn import contract
from kirolearn.extract import heuristic

ROOT = "/home/dev/shop"


def turn_events(*steps: tuple[str, dict], session: str = "s-1") -> list[dict]:
    """Events as storage hands them to a worker (bodies decoded), in time order."""
    events = []
    for kind, body in steps:
        event = contract.make_event(kind, body, namespace=NAMESPACE, actor_id="dev",
                                    session_id=session, surface="kiro-cli", version="2.1",
                                    client_id="laptop", project_path=ROOT)
        events.append({**event, "project_path": ROOT})
    return events


def text(content: str) -> dict:
    return {"type": "text", "content": content}


def tool(name: str, tool_input: dict, response: object) -> dict:
    return {"type": "json", "data": {"tool_name": name, "tool_input": tool_input,
                                     "tool_response": response}}


def bash(stdout: str, exit_status: int = 0, stderr: str = "") -> dict:
    return {"success": exit_status == 0,
            "result": [{"exit_status": str(exit_status), "stdout": stdout, "stderr": stderr}]}


FAILING = """..F..
=================================== FAILURES ===================================
____________________________ test_export_without_customer ______________________
    def test_export_without_customer():
>       rows = export_invoices([Invoice(id=1, customer=None)])
src/billing/export.py:42: in export_invoices
    writer.writerow([row['customer_id'], row['total']])
E   KeyError: 'customer_id'
=========================== short test summary info ============================
FAILED tests/test_export.py::test_export_without_customer - KeyError: 'customer_id'
1 failed, 4 passed in 0.31s
"""

KIRO_CLI_SESSION = turn_events(
    ("prompt", text("The invoice CSV export crashes with a KeyError when an invoice has no"
                    " customer. Fix it.")),
    ("tool_use", tool("fs_read", {"operations": [
        {"mode": "Line", "path": f"{ROOT}/src/billing/export.py"}]},
        {"success": True, "result": ["def export_invoices(rows): ..."]})),
    ("tool_use", tool("execute_bash", {"command": "pytest -q tests/test_export.py",
                                       "summary": "run the export tests"}, bash(FAILING, 1))),
    ("tool_use", tool("fs_write", {"command": "str_replace",
                                   "path": f"{ROOT}/src/billing/export.py",
                                   "old_str": "writer.writerow([row['customer_id'], row['total']])",
                                   "new_str": "customer = row.get('customer_id') or ''\n"
                                              "writer.writerow([customer, row['total']])"},
                      {"success": True, "result": ["ok"]})),
    ("tool_use", tool("todo_list", {"command": "complete", "completed_indices": [0]},
                      {"success": True})),
    ("tool_use", tool("execute_bash", {"command": "pytest -q tests/test_export.py"},
                      bash("5 passed in 0.28s\n"))),
    ("session_summary", text("Fixed the crash: export rows without a customer now get an empty"
                             " customer column instead of raising KeyError. All 5 export tests"
                             " pass.")),
)


def test_a_kiro_cli_fix_becomes_a_turn_and_an_error():
    records = heuristic.extract(NAMESPACE, KIRO_CLI_SESSION)
    assert [r["observation_type"] for r in records] == ["tool_use", "error"]
    turn, error = records
    assert turn["title"] == ("The invoice CSV export crashes with a KeyError when an invoice"
                             " has no customer. Fix it.")
    assert turn["facts"] == [  # the file read was edited too: its edit says so
        "ran `pytest -q tests/test_export.py` → exit 1, 1 failed (KeyError)",
        "edited `src/billing/export.py` (+2 −1): `customer_id`, `customer`",
        "ran `pytest -q tests/test_export.py` → exit 0, 5 passed",
    ]
    assert turn["files_touched"] == ["src/billing/export.py"]
    assert "Done: edited 1 file, ran 2 commands (1 failed)." in turn["summary"]
    assert turn["summary"].endswith("All 5 export tests pass.")
    assert turn["summary"].count("Fixed the crash") == 1  # the conclusion, stored once
    assert {"billing", "export", "KeyError", "customer_id"} <= set(turn["concepts"])
    assert turn["source_event_ids"] == [e["event_id"] for e in KIRO_CLI_SESSION]
    assert error["title"] == "`pytest -q tests/test_export.py` failed"
    assert "E   KeyError: 'customer_id'" in error["summary"]
    assert "1 failed, 4 passed" in error["summary"]
    assert error["files_touched"] == ["src/billing/export.py", "tests/test_export.py"]
    for r in records:
        contract.validate_record(r)
        assert r["strategy"] == "heuristic" and r["namespace"] == NAMESPACE


def test_a_claude_code_change_reads_edits_and_tests():
    events = turn_events(
        ("prompt", text("Add retries with backoff to the zmq client")),
        ("tool_use", tool("Read", {"file_path": f"{ROOT}/kirolearn/transport.py"},
                          {"type": "text",
                           "file": {"filePath": f"{ROOT}/kirolearn/transport.py"}})),
        ("tool_use", tool("Grep", {"pattern": "def call", "path": ROOT}, {"numFiles": 1})),
        ("tool_use", tool("Edit", {"file_path": f"{ROOT}/kirolearn/transport.py",
                                   "old_string": "def call(self):\n    return self._send()",
                                   "new_string": "def call(self):\n    for attempt in range(3):\n"
                                                 "        ...\n    return self._send()"},
                          {"filePath": f"{ROOT}/kirolearn/transport.py", "success": True})),
        ("tool_use", tool("Bash", {"command": "pytest -q tests/test_transport.py",
                                   "description": "Run transport tests"},
                          {"stdout": "....\n4 passed in 0.12s\n", "stderr": "",
                           "interrupted": False, "isImage": False})),
        ("session_summary", text("Added three attempts with exponential backoff to"
                                 " `Client.call`; the transport tests pass.")),
    )
    [turn] = heuristic.extract(NAMESPACE, events)
    assert turn["title"] == "Add retries with backoff to the zmq client"
    assert turn["facts"] == ["edited `kirolearn/transport.py` (+4 −2): `call`",
                             "ran `pytest -q tests/test_transport.py` → 4 passed"]
    assert turn["summary"].endswith("the transport tests pass.")
    # the lines the edit added, then those it removed, each once: searched, never shown
    assert turn["changes"] == "for attempt in range(3):\n..."


def test_a_turn_reads_like_a_note_one_fact_per_file_edited_and_one_for_files_read():
    def edit(path: str, old: str, new: str) -> tuple[str, dict]:
        return ("tool_use", tool("Edit", {"file_path": f"{ROOT}/{path}", "old_string": old,
                                          "new_string": new}, {"success": True}))

    events = turn_events(
        ("prompt", text("Rename the retry setting and use it in the client")),
        ("tool_use", tool("Read", {"file_path": f"{ROOT}/kirolearn/config.py"}, {})),
        ("tool_use", tool("Read", {"file_path": f"{ROOT}/docs/configuration.md"}, {})),
        ("tool_use", tool("Read", {"file_path": f"{ROOT}/kirolearn/transport.py"}, {})),
        edit("kirolearn/config.py", "retries = 3", "max_attempts = 3"),
        edit("kirolearn/transport.py", "def call(self):\n    n = cfg.retries",
             "def call(self):\n    n = cfg.max_attempts"),
        edit("kirolearn/config.py", "def load():\n    a = 1", "def load():\n    a = 2"),
        ("tool_use", tool("Read", {"file_path": f"{ROOT}/README.md"}, {})),
    )
    [turn] = heuristic.extract(NAMESPACE, events)
    assert turn["facts"] == [
        "read `docs/configuration.md`, `README.md`",
        "edited `kirolearn/config.py` (+3 −3): `max_attempts`, `retries`, `load`",
        "edited `kirolearn/transport.py` (+2 −2): `call`, `max_attempts`",
    ]
    assert turn["files_touched"] == ["kirolearn/config.py", "docs/configuration.md",
                                     "kirolearn/transport.py", "README.md"]


def test_a_failing_tool_without_a_command_is_an_error_too():
    events = turn_events(("prompt", text("deploy the stack")),
                         ("tool_use", tool("use_aws", {"service_name": "cloudformation"},
                                           {"success": False, "error": "AccessDenied: not"
                                            " authorized to perform DescribeStacks"})))
    turn, error = heuristic.extract(NAMESPACE, events)
    assert turn["facts"] == ["`use_aws` failed"]
    assert error["title"] == "`use_aws` failed" and "AccessDenied" in error["summary"]


def test_notes_and_looking_around_make_nothing_of_their_own():
    events = turn_events(("note", text("session started")))
    assert heuristic.extract(NAMESPACE, events) == []
    looking = turn_events(("prompt", text("which files handle billing?")),
                          ("tool_use", tool("glob", {"pattern": "**/billing/*.py"}, "a.py\nb.py")),
                          ("tool_use", tool("fs_read", {"operations": [
                              {"mode": "Directory", "path": f"{ROOT}/src"}]}, {"success": True})),
                          ("session_summary", text("Billing lives in src/billing/.")))
    [turn] = heuristic.extract(NAMESPACE, looking)
    assert turn["observation_type"] == "discovery" and turn["facts"] == []
    assert turn["title"] == "which files handle billing?"
    assert turn["summary"] == "Billing lives in src/billing/."
    assert turn["files_touched"] == []


def test_sessions_in_one_batch_keep_their_own_turns():
    first = turn_events(("prompt", text("rename the cart module")), session="a")
    second = turn_events(("prompt", text("why is CI slow?")), session="b")
    tail = turn_events(("tool_use", tool("execute_bash", {"command": "git mv cart.py basket.py"},
                                         bash(""))), session="a")
    records = heuristic.extract(NAMESPACE, [first[0], second[0], tail[0]])
    assert [r["title"] for r in records] == ["rename the cart module"]  # b's only asks
    assert records[0]["facts"] == ["ran `git mv cart.py basket.py` → exit 0"]
    assert records[0]["source_event_ids"] == [first[0]["event_id"], tail[0]["event_id"]]


def test_a_question_alone_is_no_record_but_joins_the_next_turn():
    """A Kiro IDE answer's stop is empty: the question alone would be an echo."""
    events = turn_events(
        ("prompt", text("How does the invoice export pick its columns?")),
        ("tool_use", tool("fs_read", {"operations": [
            {"mode": "Directory", "path": f"{ROOT}/src"}]}, {"success": True})),
        ("session_summary", text("")),
        ("prompt", text("Thanks! And where are the totals rounded?")),
        ("prompt", text("Round totals half-up in the export")),
        ("tool_use", tool("fs_write", {"command": "str_replace",
                                       "path": f"{ROOT}/src/billing/export.py",
                                       "old_str": "total = round(total, 2)",
                                       "new_str": "total = round_half_up(total, 2)"},
                          {"success": True})))
    [turn] = heuristic.extract(NAMESPACE, events)
    assert turn["title"] == "Round totals half-up in the export"
    assert turn["summary"].startswith("Asked before: How does the invoice export pick its"
                                      " columns? Thanks! And where are the totals rounded?")
    assert turn["facts"] == ["edited `src/billing/export.py` (+1 −1): `round_half_up`,"
                             " `total`"]
    assert turn["source_event_ids"] == [e["event_id"] for e in events]
    questions = turn_events(("prompt", text("what does `kirolearn scrub` do?")),
                            ("prompt", text("Explain the batching.")))
    assert heuristic.extract(NAMESPACE, questions) == []


def test_what_a_prompt_states_is_kept_and_a_question_answered_is_kept():
    stated = turn_events(("prompt", text("We deploy with pnpm, never npm. Remember that.")))
    [record] = heuristic.extract(NAMESPACE, stated)
    assert record["title"] == "We deploy with pnpm, never npm. Remember that."
    answered = turn_events(("prompt", text("why is CI slow?")),
                           ("session_summary", text("The e2e job installs Chromium each run;"
                                                    " caching it would save four minutes.")))
    [record] = heuristic.extract(NAMESPACE, answered)
    assert record["title"] == "why is CI slow?"
    assert record["summary"].startswith("The e2e job installs Chromium")


def test_a_summary_that_adds_nothing_to_the_title_is_not_written():
    stated = turn_events(("prompt", text("We deploy with pnpm, never npm.")))
    [record] = heuristic.extract(NAMESPACE, stated)
    assert record["title"] == "We deploy with pnpm, never npm." and record["summary"] == ""
    contract.validate_record(record)
    concluded = turn_events(("session_summary", text("Billing moved to src/billing.")))
    [record] = heuristic.extract(NAMESPACE, concluded)  # its prompt was in another batch
    assert record["title"] == "Billing moved to src/billing." and record["summary"] == ""


@given(st.text(max_size=60), st.text(max_size=60))
def test_a_summary_is_kept_whole_or_left_out_only_when_it_repeats_the_title(title, summary):
    kept = heuristic.beyond(title, summary)
    assert kept in ("", summary)
    plain = [" ".join(t.split()).rstrip(" .!?:").casefold() for t in (title, summary)]
    assert (kept == "") == (summary == "" or plain[0] == plain[1])
    assert heuristic.beyond("Fix the cart", " fix  the CART. ") == ""


WORD = st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


@given(st.lists(WORD, min_size=4, max_size=12), st.text(max_size=80), st.booleans())
def test_a_statement_is_never_taken_for_a_question(words, around, before):
    """Whatever questions surround it, a sentence that states something keeps the turn."""
    if words[0] in heuristic.QUESTION_WORDS:
        words = ["we", *words]
    statement = " ".join(words).capitalize() + "."
    request = f"{statement} {around}" if before else f"{around}\n{statement}"
    assert not heuristic.only_asks(request)


payload = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30),
                       lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.sampled_from(["path", "file_path", "command",
                                                         "result", "stdout", "exit_status",
                                                         "success", "operations", "old_str",
                                                         "new_str", "edits", "x"]), inner,
                                         max_size=5), max_leaves=20)


@given(st.lists(st.tuples(st.sampled_from(["prompt", "tool_use", "session_summary", "note"]),
                          st.text(max_size=40), st.sampled_from(["fs_write", "Bash", "Read", "x"]),
                          payload, payload), max_size=8))
def test_any_batch_gives_valid_records(steps):
    events = turn_events(*[
        (kind, tool(name, tool_input if isinstance(tool_input, dict) else {"x": tool_input},
                    response) if kind == "tool_use" else text(words or "x"))
        for kind, words, name, tool_input, response in steps])
    records = heuristic.extract(NAMESPACE, events)
    for r in records:
        assert contract.validate_record(r) is r
        assert r["namespace"] == NAMESPACE
        assert set(r["source_event_ids"]) <= {e["event_id"] for e in events}


def test_every_name_an_edit_touched_is_a_concept_and_the_fact_shows_a_few():
    """An edit of twelve functions: its fact names the first eight, the record's
    concepts (searched, never shown) hold all twelve; plain English words a comment
    caught (``type which``) are neither."""
    names = [f"handle_case_{n}" for n in range(12)]
    new = "# a type which is kept\n" + "".join(f"def {name}():\n    pass\n" for name in names)
    [turn] = heuristic.extract(NAMESPACE, turn_events(
        ("prompt", text("Split the dispatcher into one handler per case")),
        ("tool_use", tool("Write", {"file_path": f"{ROOT}/app/cases.py", "content": new},
                          {"success": True}))))
    [fact] = turn["facts"]
    assert fact.endswith(": " + ", ".join(f"`{name}`" for name in names[:8]))
    assert set(names) <= set(turn["concepts"]) and "which" not in turn["concepts"]
    assert "which" not in fact
    assert turn["changes"].startswith("# a type which is kept\ndef handle_case_0():\npass\n")
    assert turn["changes"].count("pass") == 1  # a line changed twice is one line


def test_trailers_addresses_generated_lines_and_long_lists_stay_out_of_a_record():
    """A squashed commit's message as a prompt: its subject is the title; its trailers,
    addresses and "generated with" line are dropped, its list of test names cut."""
    names = "\n".join(f"tests/test_client.py::test_redirect_{n}" for n in range(20))
    message = ("Follow redirects across hosts (#3412)\n\n"
               f"Each redirect is checked against the allowed hosts.\n\n{names}\n\n"
               "Generated with a release tool\n"
               "Co-authored-by: Kar Petrosyan <kar@example.com>\n"
               "Signed-off-by: Tom <tom@example.com>")
    [record] = heuristic.extract(NAMESPACE, turn_events(
        ("prompt", text(message)),
        ("tool_use", tool("fs_write", {"command": "strReplace", "path": f"{ROOT}/src/client.py",
                                       "oldStr": "a", "newStr": "b"}, {"success": True})),
        ("session_summary", text("Done."))))
    assert record["title"] == "Follow redirects across hosts (#3412)"
    said = record["title"] + record["summary"] + " ".join(record["facts"] + record["concepts"])
    for noise in ("Co-authored-by", "Signed-off-by", "@", "Generated with", "redirect_19"):
        assert noise not in said, noise
    assert "Each redirect is checked against the allowed hosts." in record["summary"]
    assert "test_redirect_2 … and 17 more" in record["summary"]
    contract.validate_record(record)


@given(st.text(max_size=300))
def test_noise_is_taken_out_once(text_):
    from kirolearn.words import without_noise
    once = without_noise(text_)
    assert without_noise(once) == once and len(once) <= len(text_) + 20
