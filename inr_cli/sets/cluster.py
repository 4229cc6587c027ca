"""`inr fit-many --ray`: the plan's shards fitted by workers on a Ray cluster; the driver only plans
and records.

Workers read the images where they lie (storage every node mounts at the same path, or a URL
through fsspec), decode, fit and write: each network into its row of weights.npy.part (or, where
that is not safe, output_kind.py, into the shard's file), then the shard's file atomically, in an
output folder they must reach too (shared storage, or a URL); a pack in flight is saved there at
the clock interval, so a shard sent again continues it. The driver sends each worker the names of
a shard (never pixels) and keeps two shards in flight per worker, so that the next shard is read
and decoded while this one fits. What the plan must know of each image is probed by Ray tasks in
parallel. A task or worker that cannot reach the images (a
folder on the driver's machine, a URL only it can open) says so, and is sent the files' bytes,
read by the driver (ahead, on a thread of its own: read_ahead.py) and never decoded there; each
decides for itself, so a cluster where only some nodes reach the images works too.

Workers are sized from each node's own resources (place_workers) and bound to their node; what no
node can give ends the run before any work is sent. Ray does the placement on GPUs and the
restarting of dead processes; the driver (Scheduler) decides what a loss means: a shard lost with
its worker or node is sent again, alone, to another node, and said; the node that lost it is left
out for the rest of the run; a shard lost on two nodes for the same reason stops the run naming
its images (or, out of memory, suggesting a smaller --pack), so a poisoned input cannot loop
forever. A shard fitting far longer than the others is sent to another node too (first result
kept). Every wait on Ray is short, so that a signal ends the run at once. A driver that dies loses
only the shards in flight: the same command finishes the set.
"""

from __future__ import annotations

import bisect
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import NamedTuple

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.console import info, notice
from inr_cli.core.network import NetworkSpec
from inr_cli.core.training_loop import Interrupted, Signals
from inr_cli.errors import InrError
from inr_cli.extras import require
from inr_cli.formats.network_set import PLAN, SHARDS, WEIGHTS_PART
from inr_cli.formats.start import start_sha256
from inr_cli.hooks import hook
from inr_cli.limits import MAX_LIST_BYTES
from inr_cli.sets import inputs
from inr_cli.sets.output_kind import output_storage, storage_kind
from inr_cli.sets.packs import default_pack, fit_shard, load_entry
from inr_cli.sets.partial import remove_partials
from inr_cli.sets.plan import ImageEntry, Plan, entry_values
from inr_cli.sets.read_ahead import ReadAhead
from inr_cli.sets.set_folder import SetFolder
from inr_cli.sets.storage import DamagedShard, assemble, read_shard, shard_name, write_shard

# Images per shard when --pack is not given: the unit of work, of resuming and of the driver's
# bookkeeping. Each worker fits a shard in packs sized from its own device.
RAY_SHARD = 512
MAX_ATTEMPTS = 3  # a worker that dies this many times while starting up is not bad luck
IN_FLIGHT = 2  # shards queued on each worker: one fitting, the next being read and decoded
PROBE_CHUNK = 1000  # images per probe task
SENT_PIECE = 32 << 20  # file bytes per probe task when the driver sends the files
SENT_IN_FLIGHT = 4  # probe tasks carrying the driver's bytes at once: its memory stays bounded
SENT_AHEAD = 256 << 20  # file bytes read ahead for the workers that are sent them (and one shard's more)
UNREACHABLE = "unreachable"  # a probe task's answer when it cannot reach the files of its chunk
POLL = 0.2  # seconds of each wait on Ray: the driver looks at the signals and the clock in between
START_DEADLINE = float(os.environ.get("INR_RAY_START_TIMEOUT", 300))  # seconds for the workers to start
STRAGGLER_FACTOR = 4  # a shard fitting this many times longer than the typical one is sent elsewhere too
STRAGGLER_FLOOR = 10.0  # seconds under which no shard counts as a straggler: start-up noise


class OnRay:
    """fit-many's shards fitted on a Ray cluster (a driver.Runner): the images probed by Ray tasks,
    the shards fitted by ShardWorkers."""

    def __init__(self, address: str, workers: int | None, gpus_per_worker: float | None):
        with interruptible("while joining the Ray cluster"):
            self.ray = connect(address)
        self.where = f"Ray ({address})"
        self.workers, self.gpus_per_worker = workers, gpus_per_worker
        self.nodes: list[str] = []  # the nodes of the workers still trusted when the fitting ended

    def probe(self, listed: list[inputs.Listed], config: Config) -> list[tuple]:
        with interruptible("while the images were probed"):
            return probe_on_ray(self.ray, listed, config)

    def pack_for(self, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
        return RAY_SHARD

    def machines(self, config: Config) -> int:
        """The nodes that would get workers (run_on_ray may use fewer, for a run of few shards)."""
        nodes = self.ray.nodes()
        try:
            places = place_workers(nodes, config.training.device, self.workers, self.gpus_per_worker)
        except InrError:  # no node can take a worker: the run stops before fitting, saying so
            return sum(1 for node in nodes if node.get("Alive", True))
        return len({place.node for place in places})

    def fit(self, plan: Plan, folder: SetFolder, pending: list[int], on_shard, signals: Signals, progress) -> None:
        # The workers' steps are not followed here: the progress moves shard by shard (on_shard).
        if pending:  # a finished set run again starts no worker
            self.nodes = run_on_ray(self.ray, plan, folder, pending, on_shard, self.workers, self.gpus_per_worker)

    def assemble(self, folder: SetFolder, plan: Plan, networks: bool) -> tuple[int, str]:
        """A set at a URL is assembled by a task on a node whose worker wrote to it (another than the
        driver's where there is one): its shards hold the networks, which would otherwise all cross
        the driver's network, down and up again. A local folder, a set with nothing fitted this time,
        or a task that failed: the driver assembles."""
        if folder.local or not self.nodes or not networks:
            return assemble(folder, plan, networks), ""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        own = self.ray.get_runtime_context().get_node_id()
        node = next((node for node in self.nodes if node != own), self.nodes[0])
        # No CPU asked: the work is reading and writing, and a busy cluster must not keep it waiting.
        task = self.ray.remote(num_cpus=0, max_retries=0)(assemble_task)
        failed = None
        with Signals():
            try:
                ref = ray_call(task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)).remote,
                               str(folder), configuration.to_json(plan.config))
                while not wait_ready(self.ray, [ref], POLL):
                    pass
                return ray_call(self.ray.get, ref, timeout=POLL)
            except Interrupted as exc:
                info(f"{exc} while the set was assembled: every network is fitted and kept in {folder}; run the "
                     f"same command again to assemble the set")
                raise SystemExit(128 + exc.signum) from None
            except lost_errors(self.ray) as exc:
                failed = f"was lost ({loss_reason(self.ray, exc)})"
            except self.ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, (InrError, DamagedShard)):
                    raise InrError(str(exc.cause)) from None
                failed = f"failed ({str(exc.cause or exc).strip().splitlines()[-1]})"
        notice(f"the assembly of the set on the cluster {failed}; the driver assembles it")
        return assemble(folder, plan), ""


@contextmanager
def interruptible(doing: str):
    """A signal before the fitting starts ends the command at once, as it does during the fitting
    (nothing is fitted yet, so nothing is lost)."""
    with Signals():
        try:
            yield
        except Interrupted as exc:
            info(f"{exc} {doing}: nothing is fitted yet; run the same command again to start")
            raise SystemExit(128 + exc.signum) from None


def gpu_problem(device: str, assigned_gpus: list, node_gpus: float, unavailable_reason: str | None) -> str | None:
    """Why this worker would leave a GPU idle or cannot have one (None: all is well). A worker that
    Ray gave a GPU, or one on a node with a GPU under --device auto, must use it."""
    if device == "cpu":
        return None
    if assigned_gpus or node_gpus > 0:
        if unavailable_reason is None:
            return None
        given = f"Ray gave it GPU {','.join(map(str, assigned_gpus))}" if assigned_gpus else "its node has a GPU"
        return f"a worker cannot use its GPU ({given}): {unavailable_reason}"
    if device == "gpu":
        return "--device gpu: a worker's node has no GPU"
    return None


class WorkerBackend(NamedTuple):
    backend: object | None  # None where the worker cannot do its job (problem)
    problem: str | None  # why it cannot: a GPU asked for that it cannot use
    fallback: str | None  # why a GPU node's worker fits on the CPU instead
    where: str  # its node's address and its pid


def worker_backend(config: Config, settings: dict) -> WorkerBackend:
    """The backend of a Ray worker (fit-many's ShardWorker, meta-init's MetaWorker) on its node: a GPU
    node that cannot use its GPU fits on the CPU, as an in-process run does, unless a GPU was asked
    for (--device gpu, --gpus-per-worker: settings["gpu_asked"]); settings["kind"] "cpu" is a CPU
    worker whatever the node has."""
    import ray

    from inr_cli.backends import get_backend, kernel_options
    from inr_cli.backends.gpu_probe import gpu_unavailable_reason

    device, on_cpu = config.training.device, settings.get("kind") == "cpu"
    context = ray.get_runtime_context()
    node = next((n for n in ray.nodes() if n["NodeID"] == context.get_node_id()), {})
    reason = gpu_unavailable_reason() if device != "cpu" and not on_cpu else None
    problem = None if on_cpu else gpu_problem(device, ray.get_gpu_ids(), node.get("Resources", {}).get("GPU", 0),
                                              reason)
    fallback = problem if problem and not settings.get("gpu_asked") else None
    problem = None if fallback else problem
    use = "gpu" if device != "cpu" and not on_cpu and reason is None else "cpu"
    backend = None if problem else get_backend(use, **kernel_options(config.training))
    return WorkerBackend(backend, problem, fallback, f"{node.get('NodeManagerAddress', '?')} (pid {os.getpid()})")


class ShardWorker:
    """One per GPU share (or per machine's CPUs): the backend, and with it the compiled kernels, made
    once; shards decoded on Ray's threads while another fits, so that the next one is ready when
    this one ends."""

    def __init__(self, settings: dict):
        self.config = configuration.from_json(settings["config"])
        self.spec = NetworkSpec.from_json(settings["spec"])
        self.out = SetFolder(settings["out"], settings["rows_in_place"])
        self.folder = settings["folder"]
        self.shard_size = settings["pack"]
        self.start_sha256 = settings.get("start_sha256", "")  # a file start's, as the driver read it
        self.output_start = settings.get("output_start")  # a shared start's outputs, as the driver chose them
        hook("worker-start", out=settings["out"])
        self.backend, self.problem, self.fallback, self.where = worker_backend(self.config, settings)
        # Shards fit one at a time, always on this one thread: fitted on whichever of Ray's threads
        # took the call, every shard after the first ran several times slower on the CPU backend
        # (measured, and gone with one fitting thread; the BLAS threading is the likely cause).
        self.fitting = ThreadPoolExecutor(1, thread_name_prefix="inr-fit")

    def check(self, sample: tuple[str, int] | None = None) -> dict:
        """What the driver must know before sending work: a reason this worker cannot do its job, and
        whether it reaches the inputs (`sample`: an image's location and listed size) or must be sent
        their files."""
        problem = None
        if self.problem:
            problem = f"{self.where}: {self.problem}"
        else:
            cannot = self.out.cannot_write(SHARDS)
            if not cannot and self.out.rows_in_place:
                try:  # opened for writing, not written: the permission bits alone do not tell
                    os.close(os.open(self.out.local / WEIGHTS_PART, os.O_RDWR))
                except OSError as exc:
                    cannot = f"cannot write to {self.out.local / WEIGHTS_PART} ({exc.strerror or exc})"
            if cannot:
                problem = f"{self.where}: {cannot} (the workers write the networks: the output must be on storage " \
                          f"they share, or a URL they can write)"
            elif self.start_sha256:
                problem = other_start(self.config.training.init, self.start_sha256, self.where)
        fallback = f"{self.where}: {self.fallback}" if self.fallback else None
        return {"problem": problem, "fallback": fallback, "where": self.where,
                "backend": self.backend.name if self.backend else None,
                "reaches": sample is None or inputs.reaches(*sample),
                "storage": storage_kind(self.out.local) if self.out.local else None}

    def fit(self, index: int, entry_fields: tuple[tuple, ...], rows: list[int],
            contents: list[bytes] | None = None, rows_in_place: bool = True) -> dict:
        """Fit and write shard `index`, its networks at `rows` of the set (rows_in_place, else in its
        shard's file): its images (each entry as the tuple of its fields, see submit in run_on_ray)
        read from their locations, or decoded from the files' bytes `contents` that the driver sent."""
        self.out.rows_in_place = rows_in_place  # the driver's word, on every call: a restarted worker too
        entries = [ImageEntry(*values) for values in entry_fields]
        names = [entry.name for entry in entries]
        hook("shard-start", names=names, out=str(self.out))
        plan = Plan(self.folder, self.config, self.spec, entries, [], self.shard_size, start_sha256=self.start_sha256,
                    output_start=self.output_start)
        contents = contents or [None] * len(entries)
        images = [load_entry(entry, self.config, data) for entry, data in zip(entries, contents)]
        first = images[0]
        pack = min(len(images), default_pack(self.backend, self.spec, self.config, first.width, first.height))
        result = self.fitting.submit(fit_shard, self.backend, plan, images, names, pack=pack, saved_in=self.out,
                                     shard=index).result()
        # A straggler's second copy may have finished first: its shard file says its rows are
        # written, and this copy leaves them alone. The two copies may still both be past this check;
        # then both write the image's network to the same rows (the fit is deterministic: the same bits on
        # nodes of one processor kind, equal within rounding across kinds), which is harmless.
        if not self.out.exists(shard_name(index)):
            write_shard(self.out, index, result, rows)
            remove_partials(self.out, [index])
        return {"names": result["names"], "psnr": result["psnr"], "steps": result["steps"]}  # the driver sums them


def other_start(init: str, sha256: str, where: str) -> str | None:
    """Why a worker cannot start its networks from the file start the driver read (None: the same file)."""
    try:
        same = start_sha256(init) == sha256
    except InrError as exc:
        return f"{where}: {exc}"
    return None if same else f"{where}: its --init {init} is not the file the driver read (another sha256); the " \
                             f"workers must read the same start (shared storage)"


def assemble_task(out: str, config_json: str) -> tuple[int, str]:
    """storage.assemble of the set at `out` run on a node of the cluster (OnRay.assemble), with the
    plan the driver wrote there and the driver's configuration (a rerun's free keys); the bytes per
    image and where it ran."""
    import ray

    hook("assembly-task")
    folder = SetFolder(out)
    plan = Plan.from_json(folder.read_bytes(PLAN, MAX_LIST_BYTES).decode(), folder.join(PLAN))
    plan.config = configuration.from_json(config_json)
    return assemble(folder, plan), f"{ray.util.get_node_ip_address()} (pid {os.getpid()})"


def probe_task(chunk: list[inputs.Listed], config_json: str,
               contents: list[bytes | str] | None = None) -> list | str:
    """inputs.probe of a chunk; UNREACHABLE when the driver did not send the files and this worker
    cannot reach the first one. A file reached that does not decode is that image's error, as ever."""
    first = chunk[0]
    if contents is None and not inputs.reaches(first.location, first.size):
        return UNREACHABLE
    return inputs.probe([(item.name, item.location) for item in chunk], configuration.from_json(config_json),
                        contents)


def probe_fields_task(chunk: tuple[tuple, ...], config_json: str,
                      contents: list[bytes | str] | None = None) -> tuple | str:
    """probe_task as the Ray task runs it: the chunk comes as a tuple of plain tuples (each Listed's
    fields) and the results go back as a tuple. Ray pickles a tuple whole, where each item of a list
    costs its serializer a Python call (and an object of a class, its pickling by reference): most
    of the driver's CPU in a probe."""
    answer = probe_task(list(map(inputs.Listed._make, chunk)), config_json, contents)
    return answer if answer == UNREACHABLE else tuple(answer)


def connect(address: str):
    ray = require("ray", "--ray", "cluster")
    if not ray.is_initialized():
        # The driver's INR_ settings (the hooks a test arms, say) travel to the workers.
        settings = {name: value for name, value in os.environ.items() if name.startswith("INR_")}
        try:
            if address == "local":
                # address="local": a new instance of our own, even when another (a `ray start`, a
                # test's cluster) runs on this machine, which a bare ray.init() would join.
                ray.init(address="local", include_dashboard=False, log_to_driver=False, configure_logging=False,
                         runtime_env={"env_vars": settings})
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False,
                         runtime_env={"env_vars": settings})
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InrError(f"--ray {address}: cannot join the cluster ({str(exc).splitlines()[0]})") from None
    return ray


def probe_on_ray(ray, listed: list[inputs.Listed], config) -> list[tuple]:
    """inputs.probe over the images, in chunks, as Ray tasks (retried by Ray if a worker dies). A chunk
    whose task cannot reach its files is read here (not decoded) and sent again with the files'
    bytes, in pieces, SENT_IN_FLIGHT at a time, so that the driver holds a few pieces, not the set."""
    config_ref = ray.put(configuration.to_json(config))
    task = ray.remote(num_cpus=1)(probe_fields_task)
    rows = list(map(tuple, listed))  # each chunk is sent as a tuple of these (probe_fields_task)
    found: list = [None] * len(listed)
    calls = {task.remote(tuple(rows[start:start + PROBE_CHUNK]), config_ref): start
             for start in range(0, len(listed), PROBE_CHUNK)}  # call -> its first image
    to_send: list = []  # the pieces still to send of each chunk that its task could not reach
    carrying: set = set()  # the calls with bytes in flight
    while True:
        while to_send and len(carrying) < SENT_IN_FLIGHT:
            piece = next(to_send[0], None)
            if piece is None:
                to_send.pop(0)
                continue
            start, contents = piece
            call = task.remote(tuple(rows[start:start + len(contents)]), config_ref, contents)
            calls[call] = start
            carrying.add(call)
        if not calls:
            return found
        ready = wait_ready(ray, list(calls), POLL)
        if not ready:
            continue
        start = calls.pop(ready[0])
        carrying.discard(ready[0])
        answer = ray_call(ray.get, ready[0], timeout=POLL)
        if answer == UNREACHABLE:
            to_send.append(_read_pieces(listed, start, min(start + PROBE_CHUNK, len(listed))))
        else:
            found[start:start + len(answer)] = answer


def _read_pieces(listed: list[inputs.Listed], start: int, stop: int):
    """The files of listed[start:stop] read on the driver, as (first image, contents) pieces of about
    SENT_PIECE bytes; read as they are sent, not before."""
    piece, size = [], 0
    for index in range(start, stop):
        piece.append(inputs.read_or_reason(listed[index].location))
        size += len(piece[-1])
        if size >= SENT_PIECE or index == stop - 1:
            yield index + 1 - len(piece), piece
            piece, size = [], 0


class Place(NamedTuple):
    """Where one worker goes: its node, and what it asks of it."""
    node: str      # Ray's node id
    address: str   # the node's address, for messages
    kind: str      # "gpu" or "cpu": what it was placed as
    options: dict  # num_gpus / num_cpus


def describe_nodes(nodes: list[dict]) -> str:
    """The alive nodes' CPUs and GPUs, as a message says them."""
    said = []
    for node in nodes:
        resources = node.get("Resources", {})
        have = f"{resources.get('CPU', 0):g} CPU" + (f", {resources['GPU']:g} GPU" if resources.get("GPU") else "")
        said.append(f"{node.get('NodeManagerAddress', '?')}: {have}")
    return "; ".join(said) or "no node alive"


def place_workers(nodes: list[dict], device: str, workers: int | None, gpus_per_worker: float | None) -> list[Place]:
    """The workers, sized from each alive node's own resources (ray.nodes()), so that each asks for
    what its node has and none waits for ever for what no node can give. A GPU node gets a worker per
    GPU share (with --device auto or gpu); a node without one, a worker that uses all its CPUs (its
    NumPy threads use the machine's cores), unless --device gpu. --workers caps the count, spread
    over the nodes in turn. The list goes round the nodes, so that a shorter run still uses them all."""
    alive = [node for node in nodes if node.get("Alive", True)]
    share = gpus_per_worker or 1.0
    per_node: list[list[Place]] = []  # each node's possible workers, in the order they are taken
    for node in alive:
        resources = node.get("Resources", {})
        gpus, cpus = float(resources.get("GPU", 0)), int(resources.get("CPU", 0))
        name, address = node["NodeID"], node.get("NodeManagerAddress", "?")
        if device != "cpu" and gpus + 1e-9 >= share:
            count = int(gpus / share + 1e-9)
            per_node.append([Place(name, address, "gpu", {"num_gpus": share, "num_cpus": 0})] * count)
        elif device == "gpu" or cpus < 1:
            per_node.append([])
        else:
            per_node.append([Place(name, address, "cpu", {"num_cpus": cpus})] * (cpus if workers else 1))
    if gpus_per_worker and not any(place.kind == "gpu" for places in per_node for place in places):
        raise InrError(f"--gpus-per-worker {gpus_per_worker:g}: no node of the Ray cluster has {gpus_per_worker:g} "
                       f"GPU to give a worker (the nodes have: {describe_nodes(alive)})")
    if device == "gpu" and not any(per_node):
        raise InrError(f"--device gpu: no node of the Ray cluster has a GPU (the nodes have: {describe_nodes(alive)})")
    if not any(per_node):
        raise InrError(f"--device {device}: no node of the Ray cluster has a CPU or GPU to give a worker "
                       f"(the nodes have: {describe_nodes(alive)})")
    # GPU nodes first: a run of fewer shards than workers uses their GPUs before the CPUs
    per_node.sort(key=lambda places: not (places and places[0].kind == "gpu"))
    limit = workers or sum(map(len, per_node))
    taken: list[list[Place]] = [[] for _ in per_node]
    count = 0
    while count < limit and any(per_node):
        for node, places in enumerate(per_node):
            if places and count < limit:
                taken[node].append(places.pop(0))
                count += 1
    # CPU workers on one node share its CPUs (--workers asked for more than one there)
    for places in taken:
        cpu = [place for place in places if place.kind == "cpu"]
        for index, place in enumerate(places):
            if place.kind == "cpu":
                places[index] = place._replace(options={"num_cpus": max(1, place.options["num_cpus"] // len(cpu))})
    rounds = max(map(len, taken))
    return [places[turn] for turn in range(rounds) for places in taken if turn < len(places)]


def lost_errors(ray) -> tuple:
    """What Ray raises when a shard's worker or node died under it, or its result was lost."""
    names = ("RayActorError", "ObjectLostError", "OwnerDiedError", "OutOfMemoryError", "WorkerCrashedError",
             "NodeDiedError", "ActorUnschedulableError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def loss_reason(ray, exc: Exception) -> str:
    """A lost shard's cause as a user reads it, the same words for the same cause whatever Ray
    raised, so that losses on two nodes compare. An actor killed by Ray's memory monitor comes back
    as an ActorDiedError that says so in words, not as an OutOfMemoryError."""
    text = str(exc).lower()
    if isinstance(exc, ray.exceptions.OutOfMemoryError) or "memory monitor" in text or "out of memory" in text \
            or "outofmemory" in text:
        return "out of memory"
    if isinstance(exc, getattr(ray.exceptions, "NodeDiedError", ())) or "node has died" in text \
            or "node died" in text or "doesn't exist any more" in text:  # the last: a restart bound to its node
        return "its node died"
    return "its worker died"


def wait_ready(ray, refs: list, seconds: float) -> list:
    """The refs of `refs` that are ready, waiting at most `seconds`; short enough that a signal's
    handler (Signals: Interrupted) runs between two looks."""
    if not refs:
        return []
    ready, _ = ray_call(ray.wait, refs, num_returns=1, timeout=seconds)
    return ready


def ray_call(function, *args, **options):
    """A call into Ray's core, where a signal's handler may run: Interrupted raised there comes out
    of Ray's Cython as a SystemError caused by it, and is raised again as itself."""
    try:
        return function(*args, **options)
    except SystemError as exc:
        if isinstance(exc.__cause__, Interrupted) or isinstance(exc.__context__, Interrupted):
            raise (exc.__cause__ if isinstance(exc.__cause__, Interrupted) else exc.__context__) from None
        raise


class Worker:
    """A ShardWorker the driver sends shards to, and what it knows of it."""

    def __init__(self, actor, place: Place):
        self.actor, self.place = actor, place
        self.calls: list = []  # its shard calls in flight, in the order sent: the first is fitting
        self.since = 0.0  # when its first call became the one it fits
        self.blind = False  # it cannot reach the inputs: it is sent their bytes
        self.isolated = False  # it fits a suspect shard alone
        self.trusted = False  # it passed its check and may get shards
        self.starts = 0  # its checks asked (a worker that dies starting up is asked again)
        self.where = ""  # its process as its check said it (address and pid): another one is a restart
        self.storage: tuple[str, str] | None = None  # the output's filesystem as its machine sees it


def start_workers(ray, remote, places: list[Place], settings: dict, sample: tuple[str, int]) -> list[Worker]:
    """The workers made and checked, each on its node, within START_DEADLINE; a problem a worker
    reports (a GPU it cannot use, an output it cannot write) ends the run in one line."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    pool = []
    for place in places:
        # Bound to its node: Ray restarts it there or not at all, and a node left out of the run
        # stays out.
        strategy = NodeAffinitySchedulingStrategy(place.node, soft=False)
        actor = remote.options(scheduling_strategy=strategy, **place.options).remote({**settings, "kind": place.kind})
        pool.append(Worker(actor, place))
    pings = {worker.actor.check.remote(sample): worker for worker in pool}
    lost = lost_errors(ray)
    deadline = time.monotonic() + START_DEADLINE
    checks: dict = {}
    while pings and time.monotonic() < deadline:
        for ref in wait_ready(ray, list(pings), POLL):
            worker = pings.pop(ref)
            try:
                checks[worker] = ray_call(ray.get, ref, timeout=POLL)
            except lost as exc:
                worker.starts += 1
                if worker.starts >= MAX_ATTEMPTS:
                    raise InrError(f"a Ray worker on {worker.place.address} died {MAX_ATTEMPTS} times while "
                                   f"starting ({loss_reason(ray, exc)})") from None
                notice(f"a Ray worker on {worker.place.address} died while starting ({loss_reason(ray, exc)}); "
                       f"Ray restarts it")
                pings[worker.actor.check.remote(sample)] = worker
    for check in checks.values():
        if check["problem"]:
            raise InrError(check["problem"])
    if pings:
        for worker in pings.values():
            ray.kill(worker.actor, no_restart=True)
        late = sorted({worker.place.address for worker in pings.values()})
        if not checks:
            raise InrError(f"no Ray worker started within {START_DEADLINE:g} s (asked: {len(places)} workers on "
                           f"{', '.join(late)}; the nodes have: {describe_nodes(ray.nodes())}); the cluster may be "
                           f"busy with other jobs")
        notice(f"{len(pings)} Ray workers did not start within {START_DEADLINE:g} s (on {', '.join(late)}); "
               f"the run goes on with {len(checks)}")
    started = [worker for worker in pool if worker in checks]
    fallbacks = [checks[worker]["fallback"] for worker in started if checks[worker]["fallback"]]
    if fallbacks:
        notice(f"{len(fallbacks)} worker{'s' if len(fallbacks) > 1 else ''} on GPU nodes fit on the CPU: "
               f"{fallbacks[0]} (--device gpu would stop the run instead)")
    for worker in started:
        worker.trusted, worker.blind, worker.where = True, not checks[worker]["reaches"], checks[worker]["where"]
        worker.storage = checks[worker].get("storage")  # a fit-many worker's; meta-init's writes nothing
    gpu = sum(1 for worker in started if worker.place.kind == "gpu")
    nodes = len({worker.place.node for worker in started})
    backends = ", ".join(sorted({checks[worker]["backend"] for worker in started}))
    info(f"{len(started)} worker{'s' if len(started) > 1 else ''} on {nodes} node{'s' if nodes > 1 else ''} ({gpu} "
         f"on GPUs, {len(started) - gpu} on CPUs) on {backends}")
    return started


def run_on_ray(ray, plan: Plan, out: SetFolder, pending: list[int], on_shard, workers: int | None,
               gpus_per_worker: float | None = None) -> list[str]:
    """The pending shards fitted and written by workers on the cluster; the nodes of the workers
    still trusted at the end."""
    device = plan.config.training.device
    places = place_workers(ray.nodes(), device, workers, gpus_per_worker)[:len(pending)]
    # What every worker needs of the plan is small (the images travel shard by shard), so it is
    # passed by value: an actor whose constructor arguments live in the object store cannot be
    # restarted once they are lost.
    settings = {"config": configuration.to_json(plan.config), "spec": plan.spec.to_json(), "out": str(out),
                "rows_in_place": out.rows_in_place, "folder": plan.folder, "pack": plan.pack,
                "gpu_asked": device == "gpu" or bool(gpus_per_worker), "start_sha256": plan.start_sha256,
                "output_start": plan.output_start}
    # Ray restarts a worker that dies (on its node); its shards come back to us as errors and are
    # resent elsewhere, so that a loss is said, not hidden, and counted.
    remote = ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=IN_FLIGHT)(ShardWorker)
    first = plan.entry(plan.shards[pending[0]][0])
    sample = (first.location, first.bytes)  # does a worker reach the inputs?
    pool = start_workers(ray, remote, places, settings, sample)
    if out.rows_in_place:
        _rows_in_place_as_the_workers_see_it(out, pool)
    blind = [worker for worker in pool if worker.blind]
    if blind:
        notice(f"the driver sends the images' files to {len(blind)} of {len(pool)} workers: they cannot read "
               f"{plan.folder}")
    scheduler = Scheduler(ray, plan, out, pending, on_shard, pool, sample)
    try:
        scheduler.run()
        return list(dict.fromkeys(worker.place.node for worker in scheduler.trusted()))
    finally:
        # A straggler's loser may still be fitting: ended here, it writes nothing after the set is
        # assembled (and what it wrote before is the winner's bits, see ShardWorker.fit).
        for worker in pool:
            ray.kill(worker.actor, no_restart=True)


def _rows_in_place_as_the_workers_see_it(out: SetFolder, pool: list[Worker]) -> None:
    """The driver chose rows in place from its own view of the output; a worker's machine may see it
    otherwise (the driver's disk exported to the others over NFS), and more machines may have come
    since it counted. Where any worker's view is not safe for rows in place, the run writes whole
    shards, said once (storage copes with a set started either way)."""
    nodes = len({worker.place.node for worker in pool})
    for worker in pool:
        storage = output_storage(out.local, nodes, worker.storage)
        if storage.whole_shards:
            out.rows_in_place = False
            notice(f"{storage.whole_shards} (as {worker.where} sees it): each shard's file holds its networks, and "
                   f"the set is assembled from them at the end")
            return


class Scheduler:
    """The shards sent to the workers, IN_FLIGHT at a time each, until every one is written.

    A shard lost with its worker or node is sent again, alone, to another node, and the node that
    lost it is left out for the rest of the run; a shard is blamed on its images only when it was
    lost on two nodes for the same reason. A shard that runs STRAGGLER_FACTOR times longer than the
    shards finished so far is sent to a worker on another node too; the first result is kept. Every
    wait on Ray is short, so that signals end the run at once."""

    def __init__(self, ray, plan: Plan, out: SetFolder, pending: list[int], on_shard, pool: list[Worker], sample):
        self.ray, self.plan, self.out, self.on_shard, self.sample = ray, plan, out, on_shard, sample
        self.pool = pool
        self.todo = set(pending)
        self.queue = list(pending)
        self.calls: dict = {}  # call -> (shard, worker)
        self.pings: dict = {}  # check call -> (worker, the shards it may still hold)
        self.failures: dict[int, list[tuple[str, str]]] = {}  # shard -> (node, reason) of each loss
        self.suspect: set[int] = set()  # lost once: sent alone, so that a second loss says which shard
        self.excluded: set[str] = set()  # nodes left out of the run
        self.killed: set = set()  # live workers ended by the driver: their errors are no news
        self.durations: list[float] = []  # seconds from fitting start to result of the shards finished, sorted
        self.resent: set[int] = set()  # shards sent to a second node as stragglers
        self.lost = lost_errors(ray)
        # The files of the shards next in line, read on a thread for the blind workers (made when
        # the first one is met), and the stragglers waiting for theirs to go to a blind helper.
        self.ahead: ReadAhead | None = None
        self.again: list[int] = []

    def run(self) -> None:
        try:
            self.fill()
            while self.todo:
                if not self.calls and not self.pings:
                    if not self.waiting_for_files():
                        raise InrError(self.nobody_left())
                    self.ahead.wait(POLL)
                ready = wait_ready(self.ray, list(self.calls) + list(self.pings), POLL)
                for ref in ready:
                    if ref in self.pings:
                        self.answered(ref)
                    else:
                        self.returned(ref)
                self.stragglers()
                self.fill()
        finally:
            if self.ahead:
                self.ahead.close()

    def waiting_for_files(self) -> bool:
        """Whether a blind worker waits for the files of the next shards, being read ahead."""
        return bool(self.queue) and self.ahead is not None and \
            any(worker.blind and len(worker.calls) < IN_FLIGHT for worker in self.trusted())

    def nobody_left(self) -> str:
        causes = sorted({reason for losses in self.failures.values() for _, reason in losses})
        why = f" ({'; '.join(causes)})" if causes else ""
        advice = "; a smaller --pack needs less memory" if "out of memory" in causes else ""
        return f"no worker is left to fit the remaining {len(self.todo)} shards: every node lost shards{why}" \
               f"{advice}; the finished shards are kept"

    def trusted(self) -> list[Worker]:
        return [w for w in self.pool if w.trusted and w.place.node not in self.excluded and w not in self.killed]

    def fill(self) -> None:
        self.read_ahead()
        for worker in self.trusted():
            while self.queue and len(worker.calls) < IN_FLIGHT and not worker.isolated:
                if self.stalled(worker):
                    break
                position = self.next_for(worker)
                if position is None:
                    break  # a blind worker: the files of the shards next in line are being read
                index = self.queue[position]
                if index in self.suspect:
                    if worker.calls:
                        break
                    worker.isolated = True
                self.queue.pop(position)
                if index in self.todo:
                    self.submit(worker, index)

    def read_ahead(self) -> None:
        """The files of the shards next in line read ahead, while a worker needs them sent."""
        blind = sum(1 for worker in self.trusted() if worker.blind)
        if blind and self.ahead is None:
            self.ahead = ReadAhead(self.files_of, inputs.read_bytes, SENT_AHEAD)
        if self.ahead:
            self.again = [index for index in self.again if index in self.todo]
            self.ahead.follow(self.again + self.queue[:self.window(blind)] if blind else [])

    @staticmethod
    def window(blind: int) -> int:
        """Shards at the head of the queue that are read ahead (the bytes held are bounded apart)."""
        return 2 * IN_FLIGHT * max(blind, 1)

    def files_of(self, index: int) -> list[str]:
        return [self.plan.entry(name).location for name in self.plan.shards[index]]

    def next_for(self, worker: Worker) -> int | None:
        """Where in the queue the next shard for `worker` is: the first whose files are read, for a
        blind worker (None: none yet); for the others, the first not read or being read ahead for the
        blind."""
        window = self.queue[:self.window(sum(1 for other in self.trusted() if other.blind))]
        if worker.blind:
            return next((at for at, index in enumerate(window) if self.ahead.ready(index)), None)
        if self.ahead is None:
            return 0
        # Past the window when every shard in it is read for the blind; the first, when nothing is.
        fallback = len(window) if len(self.queue) > len(window) else 0
        return next((at for at, index in enumerate(window) if not self.ahead.has(index)), fallback)

    def stalled(self, worker: Worker) -> bool:
        """A worker whose shard runs past the straggler's limit gets nothing more until it ends."""
        return bool(worker.calls) and time.monotonic() - worker.since > self.limit()

    def submit(self, worker: Worker, index: int) -> None:
        """Shard `index` sent to `worker`; a blind worker's files are read ahead already."""
        names = self.plan.shards[index]
        entries = [self.plan.entry(name) for name in names]
        contents = self.ahead.take(index) if worker.blind else None
        # The entries as a tuple of tuples of their fields: Ray pickles that whole, where a list of
        # ImageEntry cost its serializer a Python call per item and a dataclass's pickling (three
        # times the driver's CPU per call).
        entry_fields = tuple(map(entry_values, entries))
        call = worker.actor.fit.remote(index, entry_fields, [self.plan.row_of[name] for name in names], contents,
                                       self.out.rows_in_place)
        self.calls[call] = (index, worker)
        if not worker.calls:
            worker.since = time.monotonic()
        worker.calls.append(call)

    def took(self, worker: Worker, call) -> None:
        """`call` is no longer in flight on `worker`; the next one there is fitting from now."""
        if worker.calls and worker.calls[0] == call:
            worker.since = time.monotonic()
        if call in worker.calls:
            worker.calls.remove(call)

    def returned(self, call) -> None:
        index, worker = self.calls.pop(call)
        fitting_since = worker.since
        self.took(worker, call)
        try:
            result = ray_call(self.ray.get, call, timeout=POLL)
        except self.ray.exceptions.ActorUnavailableError:
            # Not a loss: the worker is out of reach for now and may still be fitting the shard.
            # It is asked for its check; once it answers, the shard is counted if written, else
            # sent again (to it or another: the fit is deterministic, so a second write is the
            # same network).
            self.ask(worker, [index])
            return
        except self.lost as exc:
            self.lose(index, worker, loss_reason(self.ray, exc))
            return
        except self.ray.exceptions.RayTaskError as exc:
            if index not in self.todo:
                return  # a straggler's copy that failed after the other one finished
            if isinstance(exc.cause, InrError):  # a pack that diverged, an image that does not decode
                raise exc.cause from None
            raise InrError(f"shard {index} failed on a worker on {worker.place.address}: "
                           f"{str(exc).strip().splitlines()[-1]}") from None
        worker.isolated = False
        if index not in self.todo:
            return  # the other copy of a straggler won
        bisect.insort(self.durations, time.monotonic() - fitting_since)
        self.finished(index, result)

    def finished(self, index: int, result: dict) -> None:
        self.todo.discard(index)
        self.suspect.discard(index)
        self.on_shard(index, result)
        hook("shard-written", shards=self.out.join(SHARDS))

    def lose(self, index: int, worker: Worker, reason: str) -> None:
        worker.isolated = False
        if worker in self.killed or index not in self.todo:
            if index in self.todo:
                self.queue.insert(0, index)
            return  # a worker the driver ended, or a copy whose twin finished: no news
        node = worker.place.node
        losses = self.failures.setdefault(index, [])
        losses.append((node, reason))
        nodes = {where for where, why in losses if why == reason}
        # On two nodes for the same reason; on a cluster reduced to one node, MAX_ATTEMPTS times there.
        if len(nodes) >= 2 or sum(why == reason for _, why in losses) >= MAX_ATTEMPTS:
            names = self.plan.shards[index]
            listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            if reason == "out of memory":
                raise InrError(f"shard {index} ran out of memory on {len(nodes)} nodes: fit fewer images at once "
                               f"(a smaller --pack, in a new -o); its images: {listed}. The finished shards are "
                               f"kept") from None
            where = f"on {len(nodes)} nodes" if len(nodes) >= 2 else f"{len(losses)} times on its last node"
            raise InrError(f"shard {index} was lost {where} ({reason}); one of its images may crash "
                           f"the workers: {listed}. The finished shards are kept") from None
        advice = " (a smaller --pack needs less memory)" if reason == "out of memory" else ""
        left_out = ""
        others = {w.place.node for w in self.trusted()} - {node}
        if node not in self.excluded and not others:
            # The last node is kept: Ray restarts the worker there, which passes its check again
            # before it gets shards.
            left_out = f"; {worker.place.address} is the last node, kept"
            self.ask(worker, [])
        elif node not in self.excluded:
            self.excluded.add(node)
            left_out = f"; node {worker.place.address} is left out for the rest of the run"
            for other in self.pool:
                if other.place.node == node and other is not worker and other not in self.killed:
                    self.killed.add(other)
                    self.ray.kill(other.actor, no_restart=True)
            # Not in `killed`: the shards it held died with it, and their errors, still to come,
            # are losses (one of them may be the shard that killed it).
            self.ray.kill(worker.actor, no_restart=True)
        notice(f"shard {index} was lost on {worker.place.address} ({reason}){advice}; it is sent again to another "
               f"node{left_out}")
        self.suspect.add(index)
        self.queue.insert(0, index)

    def ask(self, worker: Worker, holding: list[int]) -> None:
        """`worker` gets no shard until it answers its check; then `holding` is counted or resent."""
        worker.trusted = False
        asked = next((ref for ref, (other, _) in self.pings.items() if other is worker), None)
        if asked is not None:  # its other calls come back the same way: one check is enough
            self.pings[asked][1].extend(holding)
        else:
            self.pings[worker.actor.check.remote(self.sample)] = (worker, list(holding))

    def answered(self, ref) -> None:
        """A worker asked for its check (out of reach, or restarted by Ray) answered: the same check
        as a new worker's before it gets shards again."""
        worker, holding = self.pings.pop(ref)
        try:
            check = ray_call(self.ray.get, ref, timeout=POLL)
        except self.ray.exceptions.ActorUnavailableError:
            self.pings[worker.actor.check.remote(self.sample)] = (worker, holding)
            return
        except self.lost as exc:
            for index in holding:
                self.lose(index, worker, loss_reason(self.ray, exc))
            self.ray.kill(worker.actor, no_restart=True)
            return
        restarted = check["where"] != worker.where  # its process died: what it held is lost
        for index in holding:
            if index in self.todo and self.out.exists(shard_name(index)):
                self.finished(index, read_shard(self.out, index))
            elif index in self.todo and restarted:
                self.lose(index, worker, "its worker died")
            elif index in self.todo:
                self.queue.insert(0, index)
        if worker.place.node in self.excluded or worker in self.killed:  # its node was just left out
            return
        if check["problem"]:
            notice(f"{check['problem']}; that worker is left out")
            self.killed.add(worker)
            self.ray.kill(worker.actor, no_restart=True)
            return
        worker.trusted, worker.blind, worker.where = True, not check["reaches"], check["where"]

    def limit(self) -> float:
        """Seconds a shard may fit before it counts as a straggler."""
        if not self.durations:
            return float("inf")
        typical = self.durations[len(self.durations) // 2]
        return max(STRAGGLER_FLOOR, STRAGGLER_FACTOR * typical)

    def stragglers(self) -> None:
        """Each shard fitting (or queued behind one) past the limit is sent to a free worker on
        another node too, once."""
        limit, now = self.limit(), time.monotonic()
        for worker in self.trusted():
            if not worker.calls or now - worker.since <= limit:
                continue
            for call in list(worker.calls):
                index, _ = self.calls[call]
                if index in self.resent or index not in self.todo:
                    continue
                helper = next((other for other in self.trusted() if other.place.node != worker.place.node
                               and not other.calls and not other.isolated), None)
                if helper is None:
                    break
                if helper.blind and (self.ahead is None or not self.ahead.ready(index)):
                    if index not in self.again:  # its files read first (read_ahead), then sent
                        self.again.append(index)
                    break
                if index in self.again:
                    self.again.remove(index)
                self.resent.add(index)
                notice(f"shard {index} has been fitting on {worker.place.address} for {now - worker.since:.0f} s, "
                       f"{STRAGGLER_FACTOR}x the shards before it: it is sent to {helper.place.address} too, and the "
                       f"first result is kept")
                self.submit(helper, index)
