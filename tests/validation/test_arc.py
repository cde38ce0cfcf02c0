import json

import numpy as np
import pytest

from mindsimkit.validation.arc import (
    LABELS,
    LabelCache,
    label_conversations_sync,
    stretch_counts,
    stretch_shares,
    turn_requests,
)
from mindsimkit.validation.transcripts import load_transcripts


def _conv(n_turns):
    messages = [{"role": "system", "content": "hidden system prompt"}]
    for t in range(n_turns):
        messages += [{"role": "assistant", "content": f"counsellor {t}"}, {"role": "user", "content": f"patient {t}"}]
    return load_transcripts([{"id": f"x{n_turns}", "messages": messages}]).conversations[0]


def _label_from_turn(req):
    """Deterministic fake labeller: the label depends on the patient turn's number."""
    user = req.messages[-1]["content"]
    last = user.split("Last patient turn:")[1]
    k = int(last.split("patient")[1].split()[0])
    return {"label": LABELS[k % 4]}


def test_requests_show_the_four_preceding_messages_and_never_the_system_prompt():
    conv = _conv(4)
    reqs = turn_requests(conv, patient_role="user", context_messages=4)
    assert len(reqs) == 4
    last_user = reqs[3][1]["content"]
    context = last_user.split("Last patient turn:")[0]
    assert [line for line in context.splitlines()[1:] if line] == [
        "Patient: patient 1",
        "Counsellor: counsellor 2",
        "Patient: patient 2",
        "Counsellor: counsellor 3",
    ]
    assert "hidden system prompt" not in last_user
    assert "Last patient turn:\nPatient: patient 3" in last_user
    assert "first message" not in last_user
    first = turn_requests(_conv(1), patient_role="user", context_messages=0)[0][1]["content"]
    assert "first message" in first


def test_labels_are_structured_cached_and_not_paid_twice(tmp_path, fake_engines):
    engines, backend = fake_engines(_label_from_turn)
    convs = [_conv(5), _conv(3)]
    cache_path = tmp_path / "cache.jsonl"
    first = label_conversations_sync(convs, engines.role("labeller"), patient_role="user", cache=LabelCache(cache_path))
    assert first.labels == [["P", "T", "C", "F", "P"], ["P", "T", "C"]]
    assert first.failed == 0 and first.cached == 0
    # Identical turns in two conversations with identical context are one request.
    assert first.calls == len(backend.requests) == 5
    assert backend.requests[0].response_schema["properties"]["label"]["enum"] == list(LABELS)
    again = label_conversations_sync(convs, engines.role("labeller"), patient_role="user", cache=LabelCache(cache_path))
    assert again.labels == first.labels and again.calls == 0 and again.cached == 8
    assert len(backend.requests) == 5
    cached_text = cache_path.read_text()
    assert "patient" not in cached_text and "counsellor" not in cached_text  # hashes and labels only


def test_invalid_labels_are_counted_as_failures_and_retried_next_time(tmp_path, fake_engines):
    engines, backend = fake_engines(lambda req: {"label": "Z"})
    res = label_conversations_sync(
        [_conv(2)], engines.role("labeller"), patient_role="user", cache=LabelCache(tmp_path / "c.jsonl")
    )
    assert res.labels == [[None, None]] and res.failed == 2
    assert len(backend.requests) == 2 * 3  # mindcore's bounded re-asks, then given up
    assert not (tmp_path / "c.jsonl").exists()


def test_torn_cache_line_is_ignored(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"key": "a", "label": "P"}) + "\n" + '{"key": "b", "lab')
    assert LabelCache(path).labels == {"a": "P"}


def test_stretches_split_turns_into_equal_fifths():
    labels = [["P"] * 10, ["C", None, "F", "T", "P"], ["F", "F"]]
    counts = stretch_counts(labels, 5)
    assert counts.shape == (3, 5, 4)
    np.testing.assert_array_equal(counts[0].sum(axis=1), [2, 2, 2, 2, 2])
    np.testing.assert_array_equal(counts[1].sum(axis=1), [1, 0, 1, 1, 1])  # the failed turn is left out
    np.testing.assert_array_equal(counts[2].sum(axis=1), [1, 0, 1, 0, 0])
    shares = stretch_shares(counts)
    assert shares["0"] == pytest.approx({"P": 0.5, "T": 0.0, "C": 0.25, "F": 0.25})
    assert sum(shares["4"].values()) == pytest.approx(1.0)
    empty = stretch_shares(np.zeros((1, 5, 4), dtype=int))
    assert all(np.isnan(v) for v in empty["0"].values())


@pytest.mark.embedded
def test_arc_labelling_runs_on_the_embedded_engine(embedded_engines, shared_dir):
    src = shared_dir / "reference" / "mibot" / "conversations.jsonl"
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines()[:2]]
    for row in rows:
        row["messages"] = row["messages"][:4]  # two patient turns each: a few small calls
    convs = load_transcripts(rows).conversations
    res = label_conversations_sync(convs, embedded_engines.role("labeller"), patient_role="user", max_tokens=16)
    flat = [lab for row in res.labels for lab in row]
    assert len(flat) == 4 and res.calls == 4
    assert all(lab in LABELS for lab in flat if lab is not None)
    assert res.failed == sum(lab is None for lab in flat) < 4
