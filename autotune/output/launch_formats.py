"""`autotune export --format`: a recipe as YAML, as a runnable shell script, or as `docker run`
lines per node. Every format carries the recipe's own argv and env, unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from autotune.errors import ConfigError
from autotune.hardware.profiles import get_profile
from autotune.launchers.cluster import first_nodes, load_cluster, placeholder_cluster
from autotune.models import Cluster, ClusterNode, Recipe
from autotune.output.recipe import docker_script, model_dir_of, shell_script, to_yaml

Format = Literal["yaml", "shell", "docker"]
FORMATS: tuple[str, ...] = ("yaml", "shell", "docker")


def _gpus_per_node(recipe: Recipe) -> int:
    try:
        return get_profile(recipe.provenance.hardware).gpus_per_node
    except ConfigError:  # a profile resolved from this host (e.g. a named cpu) has no entry
        return 0


def docker_cluster(recipe: Recipe, image: str | None, cluster_file: Path | None) -> Cluster:
    """The boxes the docker lines address: the cluster file's first ones, else this box (one node) or
    placeholder boxes 192.168.100.x (several; said in the recipe's accuracy notes)."""
    nodes = len({n.node for n in recipe.launch.nodes})
    if cluster_file is not None:
        cluster = first_nodes(load_cluster(cluster_file), nodes, cluster_file)
    elif nodes > 1:
        cluster = placeholder_cluster(nodes, _gpus_per_node(recipe))
    else:
        gpus = _gpus_per_node(recipe)
        cluster = Cluster(nodes=[ClusterNode(ip="127.0.0.1")], gpus_per_node=gpus, rdma=False)
    chosen = image or cluster.image or recipe.launch.image
    if not chosen:
        raise ConfigError("docker lines need an image: pass --image IMAGE (or a --cluster file that names one)")
    return cluster.model_copy(update={"image": chosen, "model_dir": cluster.model_dir or model_dir_of(recipe.launch)})


def render(recipe: Recipe, fmt: str, *, image: str | None = None, cluster_file: Path | None = None) -> str:
    from autotune.launchers.docker import docker_commands

    if fmt == "yaml":
        return to_yaml(recipe)
    if fmt == "shell":
        return shell_script(recipe)
    if fmt == "docker":
        cluster = docker_cluster(recipe, image, cluster_file)
        assert cluster.image is not None
        return docker_script(recipe, docker_commands(recipe.launch, cluster), cluster.image)
    raise ConfigError(f"unknown --format {fmt!r}; use one of {', '.join(FORMATS)}")
