"""A quiet console: library logs go to OUT/logs/, progress bars count outcomes."""

from __future__ import annotations

import logging

from mindsimkit.mindcore.logs import library_logs_to
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.distilabel_steps import CheckpointWatch
from mindsimkit.profilegen.generate import checkpoint_key, prompt_hashes
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.schemas import Provenance, RoleModel


def test_library_logs_go_to_the_run_folder_not_the_terminal(tmp_path, capsys):
    with library_logs_to(tmp_path / "logs") as folder:
        logging.getLogger("distilabel.pipeline").warning("batch 3 of 9 sent")
        logging.getLogger("httpx").warning("HTTP Request: POST http://127.0.0.1/v1")
        import distilabel.utils.logging as dl

        handler = dl.RichHandler(rich_tracebacks=True)  # what distilabel's setup_logging builds
        assert isinstance(handler, logging.FileHandler)
    assert folder == tmp_path / "logs"
    captured = capsys.readouterr()
    assert "batch 3 of 9" not in captured.err + captured.out
    text = (tmp_path / "logs" / "libraries.log").read_text()
    assert "batch 3 of 9 sent" in text and "HTTP Request" in text
    # Restored afterwards: the library's own handler class is back.
    import distilabel.utils.logging as dl
    from rich.logging import RichHandler

    assert dl.RichHandler is RichHandler and logging.getLogger("httpx").propagate


def test_verbose_leaves_library_logs_alone(tmp_path):
    before = logging.getLogger("distilabel").handlers[:]
    with library_logs_to(tmp_path / "logs", verbose=True) as folder:
        assert folder is None and logging.getLogger("distilabel").handlers == before
    assert not (tmp_path / "logs").exists()


def test_checkpoint_watch_counts_outcomes_as_worker_files_land(tmp_path):
    rows = anchor_personas(load_personas("synthetic", 3, 7).rows, load_rates(None), 7)
    prov = Provenance(
        seed=7,
        toolkit_version="t",
        prompts=prompt_hashes(),
        roles=[RoleModel(role=r, engine="e", model="m") for r in ("profile_writer", "screener")],
    )
    watch = CheckpointWatch(rows, 1, prov, tmp_path, interval_s=0.01)
    seen = {}

    def workers():
        # What the distilabel workers do: one checkpoint per finished row, under the parent's key.
        for row, status in zip(rows, ("ok", "failed", "dropped")):
            watch.checkpoints.write(checkpoint_key(row, 1, prov), {"profile_id": row.profile_id, "status": status})
        return "done"

    import mindsimkit.profilegen.distilabel_steps as steps

    original = steps.Tally.add

    def spy(self, outcome, advance=1):
        original(self, outcome, advance)
        seen.update(self.counts)

    steps.Tally.add = spy
    try:
        assert watch.run(workers) == "done"
    finally:
        steps.Tally.add = original
    assert seen == {"kept": 1, "failed": 1, "dropped": 1} and not watch.pending
