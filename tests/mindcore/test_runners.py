"""One runner interface: a job chooses where its work runs once (`runner_for`), and no stage
asks which runner it holds."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from mindsimkit.mindcore.recipe import RaySettings
from mindsimkit.mindcore.runners import LocalRunner, RayRunner, runner_for

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("mindcore", "profilegen", "mindsim", "validation", "judge", "mindsim_app")
# Where Ray itself is handled: the runner classes, the Ray plumbing they use, and the recipe's settings for it.
RAY_HOME = {"mindcore/runners.py", "mindcore/shards.py", "mindcore/recipe.py"}
RAY_NAMES = {"RaySession", "run_shards", "plan_shards", "RayRunner", "import_ray"}


def _ray_mentions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name) and node.id in RAY_NAMES:
            found.append(node.id)
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in RAY_NAMES | {"ray"}:
            found.append(node.name)
        elif isinstance(node, ast.Compare):
            consts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant)]
            if "ray" in consts or "local" in consts:
                found.append(ast.unparse(node))
    return found


def test_no_stage_chooses_a_runner():
    scanned = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]
    assert len(scanned) > 100
    offenders = {
        str(p.relative_to(REPO)): m
        for p in scanned
        if str(p.relative_to(REPO)) not in RAY_HOME and (m := _ray_mentions(p))
    }
    assert offenders == {}
    # ... and the one choice is made in one place.
    source = (REPO / "mindcore" / "runners.py").read_text()
    assert (
        sum(
            1
            for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Compare) and any(isinstance(c, ast.Constant) and c.value == "ray" for c in ast.walk(n))
        )
        == 1
    )


def test_the_scan_sees_a_stage_that_branches(tmp_path):
    bad = tmp_path / "stage.py"
    bad.write_text("def f(recipe):\n    if recipe.runner == 'ray':\n        from mindcore.shards import run_shards\n")
    assert len(_ray_mentions(bad)) == 2


def test_runner_for_reads_the_recipe():
    assert isinstance(runner_for(SimpleNamespace(runner="local", ray=RaySettings())), LocalRunner)
    ray = runner_for(SimpleNamespace(runner="ray", ray=RaySettings(address="10.0.0.9:6379", profile_replicas=3)))
    assert isinstance(ray, RayRunner) and ray.profile_replicas == 3 and ray.session.address == "10.0.0.9:6379"
    assert ray.remote and not LocalRunner.remote


def test_the_local_runner_is_one_shard_of_everything_in_this_loop():
    seen = []

    async def work(engines, payload, report):
        for item in payload["items"]:
            report(item)
        seen.append(asyncio.get_running_loop())
        return [x * 10 for x in payload["items"]]

    async def main():
        run = await LocalRunner().map_shards(
            work,
            [3, 1, 2],
            key=str,
            engines=None,
            description="t",
            total=3,
            payload=lambda i, n, part: {"shard": (i, n), "items": part},
        )
        return run, asyncio.get_running_loop()

    run, loop = asyncio.run(main())
    assert run.results == [[30, 10, 20]] and (run.shards, run.workers, run.live) == (1, 1, {0})
    assert run.parts == [(0, [3, 1, 2])] and run.runner == {"runner": "local"} and seen == [loop]


@pytest.mark.parametrize("runner", [LocalRunner(), RayRunner(RaySettings())])
def test_distilabel_asks_the_runner(runner):
    pipeline = SimpleNamespace(ray=lambda: "ray pipeline")
    got = runner.distilabel_pipeline(pipeline)
    assert got == ("ray pipeline" if runner.remote else pipeline)
