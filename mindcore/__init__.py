"""Shared plumbing for every mindsim stage: the one engine layer that talks to LLMs, recipe loading,
prompt rendering, atomic I/O and provenance. Imports nothing else of ours, so `validation` can use it
without depending on the simulator."""

# The toolkit's one import namespace (setup.py maps every top-level folder into it): a package's data is read as
# `NAMESPACE.<folder>`, e.g. the prompt templates as `mindsimkit.prompts`.
NAMESPACE = "mindsimkit"

# What other packages may import from this one (tests/test_layers.py holds the code to it). Every module is
# the engine layer's public interface except where a name starts with `_`.
PUBLIC_MODULES = (
    "backends",
    "budget",
    "budget_fit",
    "client",
    "config",
    "console",
    "distilabel_llm",
    "embedded",
    "engine",
    "engine_health",
    "errors",
    "exchange",
    "fake",
    "inputs",
    "io",
    "layout",
    "logs",
    "manifest",
    "outputs",
    "plots",
    "preflight",
    "prompts",
    "provenance",
    "quotes",
    "recipe",
    "redact",
    "runlog",
    "runner",
    "runfolder",
    "runners",
    "sandbox",
    "shards",
    "stages",
    "systems",
    "types",
    "vllm_serve",
    "yamlio",
)

__version__ = "0.1.0"
