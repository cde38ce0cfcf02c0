import json

import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.validation.transcripts import load_transcripts, parse_row


def test_jsonl_reads_ids_patients_and_counts_skips(tmp_path, jsonl):
    rows = [
        {
            "id": "a",
            "patient_id": "p1",
            "messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "hello there"}],
        },
        {
            "conversation_id": "b",
            "messages": [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "   "}],
        },
        {
            "id": "c",
            "group_id": "p1",
            "messages": [{"role": "user", "content": "again"}, {"role": "assistant", "content": None}],
        },
    ]
    ts = load_transcripts(jsonl(tmp_path / "t.jsonl", rows))
    assert [c.conversation_id for c in ts.conversations] == ["a", "c"]
    assert [c.patient_id for c in ts.conversations] == ["p1", "p1"]
    counts = ts.counts("user")
    assert counts == {
        "conversations_read": 3,
        "conversations_used": 2,
        "skipped_no_patient_turn": 1,
        "skipped_too_short": 0,
        "patients": 1,
        "patient_turns": 2,
        "skipped_later_session": 0,
        "skipped_other_counsellor": 0,
        "truncated_at_max_patient_turns": 0,
    }


def test_malformed_line_names_its_line_number(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "a", "messages": [{"role": "user", "content": "x"}]})
    path.write_text(good + "\n\n" + good + "\n{not json\n")
    with pytest.raises(InputError, match=r"bad.jsonl line 4"):
        load_transcripts(path)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"id": "a"}, "'messages' must be a list"),
        ({"id": "a", "messages": [{"content": "x"}]}, r"messages\[0\] needs a string 'role'"),
        ({"id": "a", "messages": [{"role": "user", "content": 3}]}, r"messages\[0\].content must be a string"),
        (["not", "a", "mapping"], "expected a JSON object"),
    ],
)
def test_bad_records_fail_clearly(row, message):
    with pytest.raises(InputError, match=message):
        parse_row(row, "src line 9")


def test_patient_role_is_configurable_and_min_turns_filters(synth):
    rows = synth(3, seed=0, mean_words=5, turns=2)
    as_assistant = load_transcripts(rows, patient_role="assistant")
    assert as_assistant.counts("assistant")["patient_turns"] == 6
    short = load_transcripts(rows, min_patient_turns=3)
    assert short.skipped_too_short == 3 and not short.conversations


def test_datasets_input_matches_jsonl(tmp_path, synth, jsonl):
    import datasets

    rows = synth(4, seed=1, mean_words=6, patients=2)
    ds = datasets.Dataset.from_list(rows)
    from_ds = load_transcripts(ds)
    ds.save_to_disk(str(tmp_path / "saved"))
    from_disk = load_transcripts(tmp_path / "saved")
    from_jsonl = load_transcripts(jsonl(tmp_path / "t.jsonl", rows))
    assert from_ds.conversations == from_jsonl.conversations == from_disk.conversations
    assert from_ds.patients == 2


def test_missing_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_transcripts(tmp_path / "nope.jsonl")


def _arc_rows():
    """Two patients x two counsellors x sessions 0-1, each with 5 patient turns."""
    rows = []
    for p in ("p1", "p2"):
        for c in ("prod", "other"):
            for k in (0, 1):
                msgs = []
                for t in range(5):
                    msgs += [
                        {"role": "assistant", "content": f"counsellor {t}"},
                        {"role": "user", "content": f"{p} {c} {k} turn {t}"},
                    ]
                rows.append(
                    {"id": f"{p}-{c}-{k}", "patient_id": p, "counsellor": c, "session_index": k, "messages": msgs}
                )
    return rows


def test_filters_first_sessions_counsellors_and_turn_cap(tmp_path, jsonl):
    path = jsonl(tmp_path / "t.jsonl", _arc_rows())
    ts = load_transcripts(path, first_sessions_only=True, counsellors=["prod"], max_patient_turns=3)
    assert sorted(c.conversation_id for c in ts.conversations) == ["p1-prod-0", "p2-prod-0"]
    assert all(
        c.patient_turns("user") == [f"{c.patient_id} prod 0 turn {t}" for t in range(3)] for c in ts.conversations
    )
    # Cut right after the N-th patient turn: the counsellor's next reply is not kept.
    assert ts.conversations[0].messages[-1].role == "user" and len(ts.conversations[0].messages) == 6
    counts = ts.counts("user")
    assert (
        counts["skipped_later_session"],
        counts["skipped_other_counsellor"],
        counts["truncated_at_max_patient_turns"],
    ) == (4, 2, 2)
    # The cap comes before min_patient_turns: a conversation cut to 3 turns fails a minimum of 4.
    short = load_transcripts(path, max_patient_turns=3, min_patient_turns=4)
    assert short.conversations == [] and short.skipped_too_short == 8
    # Without filters every conversation is whole.
    assert len(load_transcripts(path).conversations) == 8


def test_a_filter_on_a_field_the_records_lack_is_an_error(tmp_path, jsonl):
    rows = [{"id": "a", "messages": [{"role": "user", "content": "hi"}]}]
    path = jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(InputError, match="line 1: first_sessions_only needs session_index"):
        load_transcripts(path, first_sessions_only=True)
    with pytest.raises(InputError, match="needs a counsellor field"):
        load_transcripts(path, counsellors=["x"])
    with pytest.raises(InputError, match="session_index must be a whole number"):
        parse_row({"id": "a", "session_index": "first", "messages": []}, "row 0")


def test_trial_is_read_counted_and_checked():
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.validation.transcripts import load_transcripts, parse_row

    rows = [
        {
            "id": f"s{t}{p}",
            "patient_id": p,
            "trial": t,
            "session_index": 0,
            "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        }
        for t in range(3)
        for p in ("a", "b")
    ]
    ts = load_transcripts(rows)
    assert (ts.patients, ts.trials, ts.counts("user")["trials"]) == (2, 3, 3)
    assert "trials" not in load_transcripts([{**r, "trial": None} for r in rows]).counts("user")
    with pytest.raises(InputError, match="trial must be a whole number"):
        parse_row({**rows[0], "trial": -1}, "x.jsonl line 1")
