"""`autotune export --format shell|docker`: the same argv and env as the recipe YAML.

The multi-node tests render a predicted 4-Spark recipe (nothing launches). The engine test runs a
real study's exported shell script with `python3` on PATH resolving to a shim that hands the argv
to llama-cpp-python's own server argument parser (the parser `python3 -m llama_cpp.server` uses)
and prints what it parsed instead of serving.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.models import CONTAINER_JIT_CACHE_ENV
from autotune.output.recipe import WAIT_FOR_RAY_NODES
from real_study import real_study

SPARK4 = ["--predicted", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark", "--nodes", "4"]


def _export(tmp_path: Path, args: list[str], name: str) -> Path:
    out = tmp_path / name
    assert main(["export", *args, "-o", str(out)]) == 0
    return out


def env_argv(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """`env K=V ... argv` -> (env, argv)."""
    assert command[0] == "env", command
    env = {}
    rest = command[1:]
    while rest and "=" in rest[0] and not rest[0].startswith("-"):
        key, _, value = rest.pop(0).partition("=")
        env[key] = value
    return env, rest


def script_commands(text: str) -> list[list[str]]:
    """The commands of a script (comments, `set`, `case` syntax and the Ray wait left out)."""
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("env ", "exec env ", "docker ")) and WAIT_FOR_RAY_NODES.splitlines()[0] not in line:
            commands.append(shlex.split(line.removeprefix("exec ").removesuffix(" &")))
    return commands


def test_shell_script_has_the_recipes_argv_and_env_per_node(tmp_path):
    recipe = yaml.safe_load(_export(tmp_path, SPARK4, "r.yaml").read_text())
    script = _export(tmp_path, [*SPARK4, "--format", "shell"], "run.sh")
    assert os.access(script, os.X_OK)
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    text = script.read_text()
    by_node = sorted(recipe["launch"]["nodes"], key=lambda n: n["node"])  # stable: head before server
    assert [env_argv(c) for c in script_commands(text)] == [(n["env"], n["argv"]) for n in by_node]
    # each node's branch; an unknown node is refused
    for node in range(4):
        assert f"\n  {node})\n" in text
    out = subprocess.run(["sh", str(script), "7"], capture_output=True, text=True)
    assert out.returncode == 2 and "no node 7" in out.stderr


def test_docker_lines_have_the_recipes_argv_and_env_per_node(tmp_path):
    recipe = yaml.safe_load(_export(tmp_path, SPARK4, "r.yaml").read_text())
    script = _export(tmp_path, [*SPARK4, "--format", "docker", "--image", "nvcr.io/nvidia/vllm:26.05-py3"], "d.sh")
    commands = script_commands(script.read_text())
    nodes = recipe["launch"]["nodes"]
    assert len(commands) == len(nodes)
    for command, node in zip(commands, nodes):
        env = {}
        for i, word in enumerate(command):
            if word == "-e" and "=" in command[i + 1]:
                key, _, value = command[i + 1].partition("=")
                env[key] = value
        if command[1] == "run":  # a container also keeps its JIT-compiled kernels in the mounted cache
            assert env == {**CONTAINER_JIT_CACHE_ENV, **node["env"]}
            assert "--network" in command and command[command.index("--network") + 1] == "host"
            image = command.index("nvcr.io/nvidia/vllm:26.05-py3")
            assert [command[command.index("--entrypoint") + 1], *command[image + 1:]] == node["argv"]
        else:  # the server runs inside the head's container
            assert env == node["env"]
            assert command[1] == "exec" and command[-len(node["argv"]):] == node["argv"]


def test_docker_format_without_an_image_is_bad_input(tmp_path, capsys):
    assert main(["export", *SPARK4, "--format", "docker"]) == 2
    assert "--image" in capsys.readouterr().err


def test_unknown_format_is_bad_input(capsys):
    assert main(["export", *SPARK4, "--format", "toml"]) == 2
    assert "yaml, shell, docker" in capsys.readouterr().err


PARSE_WITH_LLAMA_CPP = textwrap.dedent(
    """\
    #!/bin/sh
    exec {python} -c '
    import argparse, json, os, sys
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings
    assert sys.argv[1:3] == ["-m", "llama_cpp.server"], sys.argv
    parser = argparse.ArgumentParser()
    add_args_from_model(parser, Settings)  # exactly as llama_cpp/server/__main__.py builds it
    parser.add_argument("--config_file", type=str)
    args = parser.parse_args(sys.argv[3:])
    server = parse_model_from_args(ServerSettings, args)
    model = parse_model_from_args(ModelSettings, args)
    print(json.dumps({{"server": server.model_dump(mode="json"), "model": model.model_dump(mode="json"),
                      "argv": sys.argv[1:], "env": dict(os.environ)}}))
    ' "$@"
    """
)


@pytest.mark.engine
def test_exported_shell_script_parses_with_llama_cpp_servers_own_parser(tmp_path_factory, gemma_gguf, tmp_path):
    study = real_study(tmp_path_factory, gemma_gguf)
    db = ["--db", str(study.db), "--study", study.study]
    recipe = yaml.safe_load(_export(tmp_path, db, "r.yaml").read_text())
    script = _export(tmp_path, [*db, "--format", "shell"], "run.sh")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text(PARSE_WITH_LLAMA_CPP.format(python=shlex.quote(sys.executable)))
    (shim / "python3").chmod(0o755)
    env = {"PATH": f"{shim}:{os.environ['PATH']}", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    parsed = json.loads(out.stdout)
    node = recipe["launch"]["nodes"][0]
    assert ["python3", *parsed["argv"]] == node["argv"]
    assert all(parsed["env"].get(k) == v for k, v in node["env"].items())
    assert parsed["server"]["port"] == recipe["launch"]["port"]
    argv = node["argv"]
    assert parsed["model"]["model"] == argv[argv.index("--model") + 1] == str(gemma_gguf)
    flags = argv[3:]
    for flag, value in zip(flags[::2], flags[1::2]):  # every --flag VALUE landed in a setting
        key = flag.removeprefix("--")
        settings = parsed["model"] if key in parsed["model"] else parsed["server"]
        assert str(settings[key]).lower() == value.lower(), key

    docker = _export(tmp_path, [*db, "--format", "docker", "--image", "ghcr.io/example/llama-cpp-python:0.3.36"], "d.sh")
    (command,) = script_commands(docker.read_text())
    image = command.index("ghcr.io/example/llama-cpp-python:0.3.36")
    assert [command[command.index("--entrypoint") + 1], *command[image + 1:]] == argv
    assert f"{gemma_gguf.parent}:{gemma_gguf.parent}:ro" in command  # the model folder is mounted
    assert "--gpus" not in command  # the cpu profile has no GPU
    assert shutil.which("sh")
