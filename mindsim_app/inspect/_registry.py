"""What the `inspect_ai` entry point loads (pyproject.toml `[project.entry-points.inspect_ai]`): importing the
tasks and the model provider registers `mindsimkit/mindeval2`, `mindsimkit/patientact` and `mindsim/ROLE` with
inspect, so `inspect eval mindsimkit/mindeval2` resolves without a file path."""

from mindsimkit.mindsim_app.inspect.provider import MindsimRoleAPI
from mindsimkit.mindsim_app.inspect.tasks import mindeval2, patientact
from inspect_ai.model import modelapi


@modelapi(name="mindsim")
def mindsim() -> type[MindsimRoleAPI]:
    return MindsimRoleAPI


__all__ = ["mindeval2", "mindsim", "patientact"]
