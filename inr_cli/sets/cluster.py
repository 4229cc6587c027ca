"""`inr fit-many --ray`: the plan's shards fitted by workers on a Ray cluster; the driver only plans
and records.

Workers read the images where they lie (storage every node mounts at the same path, or a URL
through fsspec), decode, fit and write: each network into its row of weights.npy.part, then the
shard's file atomically, in an output folder they must reach too (shared storage, or a URL); a pack
in flight is saved there at the clock interval, so a shard sent again continues it. The driver
sends each worker the names of a shard (never pixels) and keeps two shards in flight per worker,
so that the next shard is read and decoded while this one fits. What the plan must know
of each image is probed by Ray tasks in parallel. A task or worker that cannot reach the images (a
folder on the driver's machine, a URL only it can open) says so, and is sent the files' bytes,
read by the driver and never decoded there; each decides for itself, so a cluster where only some
nodes reach the images works too.

Ray does the scheduling, the placement on GPUs and the restarting of dead processes. A shard lost
to a dead worker or node, a lost object or an out-of-memory kill is sent again, and said; a shard
that fails that way MAX_ATTEMPTS times stops the run naming its images, so a poisoned input
cannot loop forever. A driver that dies loses only the shards in flight: the same command
finishes the set.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.console import info, notice
from inr_cli.core.network import NetworkSpec
from inr_cli.core.training_loop import Signals
from inr_cli.errors import InrError
from inr_cli.formats.network_set import SHARDS, WEIGHTS_PART
from inr_cli.hooks import hook
from inr_cli.sets import inputs
from inr_cli.sets.packs import default_pack, fit_shard, load_entry
from inr_cli.sets.partial import remove_partials
from inr_cli.sets.plan import ImageEntry, Plan, entry_values
from inr_cli.sets.set_folder import SetFolder
from inr_cli.sets.storage import write_shard

# Images per shard when --pack is not given: the unit of work, of resuming and of the driver's
# bookkeeping. Each worker fits a shard in packs sized from its own device.
RAY_SHARD = 512
MAX_ATTEMPTS = 3  # a shard whose worker dies this many times is a poisoned input, not bad luck
IN_FLIGHT = 2  # shards queued on each worker: one fitting, the next being read and decoded
PROBE_CHUNK = 1000  # images per probe task
SENT_PIECE = 32 << 20  # file bytes per probe task when the driver sends the files
SENT_IN_FLIGHT = 4  # probe tasks carrying the driver's bytes at once: its memory stays bounded
UNREACHABLE = "unreachable"  # a probe task's answer when it cannot reach the files of its chunk


class OnRay:
    """fit-many's shards fitted on a Ray cluster (a driver.Runner): the images probed by Ray tasks,
    the shards fitted by ShardWorkers."""

    def __init__(self, address: str, workers: int | None, gpus_per_worker: float | None):
        self.ray = connect(address)
        self.where = f"Ray ({address})"
        self.workers, self.gpus_per_worker = workers, gpus_per_worker

    def probe(self, listed: list[inputs.Listed], config: Config) -> list[tuple]:
        return probe_on_ray(self.ray, listed, config)

    def pack_for(self, spec: NetworkSpec, config: Config, width: int, height: int) -> int:
        return RAY_SHARD

    def fit(self, plan: Plan, folder: SetFolder, pending: list[int], on_shard, signals: Signals, progress) -> None:
        # The workers' steps are not followed here: the progress moves shard by shard (on_shard).
        if pending:  # a finished set run again starts no worker
            run_on_ray(self.ray, plan, folder, pending, on_shard, self.workers, self.gpus_per_worker)


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


class ShardWorker:
    """One per GPU share (or per machine's CPUs): the backend, and with it the compiled kernels, made
    once; shards decoded on Ray's threads while another fits, so that the next one is ready when
    this one ends."""

    def __init__(self, settings: dict):
        import ray

        from inr_cli.backends import get_backend
        from inr_cli.backends.gpu_probe import gpu_unavailable_reason

        self.config = configuration.from_json(settings["config"])
        self.spec = NetworkSpec.from_json(settings["spec"])
        self.out = SetFolder(settings["out"])
        self.folder = settings["folder"]
        self.shard_size = settings["pack"]
        device = self.config.training.device
        context = ray.get_runtime_context()
        node = next((n for n in ray.nodes() if n["NodeID"] == context.get_node_id()), {})
        node_gpus = node.get("Resources", {}).get("GPU", 0)
        reason = gpu_unavailable_reason() if device != "cpu" else None
        self.problem = gpu_problem(device, ray.get_gpu_ids(), node_gpus, reason)
        use = "gpu" if device != "cpu" and reason is None else "cpu"
        self.backend = None if self.problem else get_backend(use, self.config.training.matmul)
        self.where = f"{node.get('NodeManagerAddress', '?')} (pid {os.getpid()})"
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
            if not cannot and self.out.local and not os.access(self.out.local / WEIGHTS_PART, os.W_OK):
                cannot = f"cannot write to {self.out.local / WEIGHTS_PART}"
            if cannot:
                problem = f"{self.where}: {cannot} (the workers write the networks: the output must be on storage " \
                          f"they share, or a URL they can write)"
        return {"problem": problem, "backend": self.backend.name if self.backend else None,
                "reaches": sample is None or inputs.reaches(*sample)}

    def fit(self, index: int, entry_fields: tuple[tuple, ...], rows: list[int],
            contents: list[bytes] | None = None) -> dict:
        """Fit and write shard `index`, its networks at `rows` of the set: its images (each entry as
        the tuple of its fields, see submit in run_on_ray) read from their locations, or decoded from
        the files' bytes `contents` that the driver sent."""
        entries = [ImageEntry(*values) for values in entry_fields]
        names = [entry.name for entry in entries]
        hook("shard-start", names=names, out=str(self.out))
        plan = Plan(self.folder, self.config, self.spec, entries, [], self.shard_size)
        contents = contents or [None] * len(entries)
        images = [load_entry(entry, self.config, data) for entry, data in zip(entries, contents)]
        first = images[0]
        pack = min(len(images), default_pack(self.backend, self.spec, self.config, first.width, first.height))
        result = self.fitting.submit(fit_shard, self.backend, plan, images, names, pack=pack, saved_in=self.out,
                                     shard=index).result()
        write_shard(self.out, index, result, rows)
        remove_partials(self.out, [index])
        return {"names": result["names"], "psnr": result["psnr"]}


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
    try:
        import ray
    except ImportError:
        raise InrError("--ray needs Ray: pip install 'inr[cluster]'") from None
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
        ready, _ = ray.wait(list(calls), num_returns=1)
        start = calls.pop(ready[0])
        carrying.discard(ready[0])
        answer = ray.get(ready[0])
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


def worker_options(ray, device: str, workers: int | None, gpus_per_worker: float | None) -> tuple[int, dict]:
    resources = ray.cluster_resources()
    gpus, cpus = float(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    if device == "gpu" or (device == "auto" and gpus > 0) or gpus_per_worker:
        if gpus == 0:
            raise InrError(f"{'--device gpu' if device == 'gpu' else '--gpus-per-worker'}: the Ray cluster has no GPU")
        share = gpus_per_worker or 1.0
        # Placed by their GPU share alone: several small-pack workers may share one GPU.
        return workers or max(1, int(gpus / share)), {"num_gpus": share, "num_cpus": 0}
    # A CPU worker's NumPy uses the cores of its machine: by default one worker per machine's worth.
    per_worker = max(1, cpus // workers) if workers else max(1, min(cpus, os.cpu_count() or 1))
    return workers or max(1, cpus // per_worker), {"num_cpus": per_worker}


def _retryable(ray) -> tuple:
    names = ("RayActorError", "ObjectLostError", "OwnerDiedError", "OutOfMemoryError", "WorkerCrashedError",
             "NodeDiedError", "ActorUnavailableError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def run_on_ray(ray, plan: Plan, out: SetFolder, pending: list[int], on_shard, workers: int | None,
               gpus_per_worker: float | None = None) -> None:
    count, options = worker_options(ray, plan.config.training.device, workers, gpus_per_worker)
    # What every worker needs of the plan is small (the images travel shard by shard), so it is
    # passed by value: an actor whose constructor arguments live in the object store cannot be
    # restarted once they are lost.
    settings = {"config": configuration.to_json(plan.config), "spec": plan.spec.to_json(), "out": str(out),
                "folder": plan.folder, "pack": plan.pack}
    # Ray restarts a dead worker without end; its shards come back to us as errors and are resent
    # (to a worker known to be alive), so that a loss is said, not hidden, and counted.
    remote = ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=IN_FLIGHT, **options)(ShardWorker)
    pool = [remote.remote(settings) for _ in range(min(count, len(pending)))]
    retryable = _retryable(ray)
    first = plan.entry(plan.shards[pending[0]][0])
    sample = (first.location, first.bytes)  # does a worker reach the inputs?
    checks = [_check(ray, worker, retryable, sample) for worker in pool]
    for check in checks:
        if check["problem"]:
            raise InrError(check["problem"])
    info(f"{len(pool)} workers ({options.get('num_gpus', 0):g} GPU, {options.get('num_cpus', 0)} CPU each) on "
         f"{', '.join(sorted({c['backend'] for c in checks}))}")
    # The workers that cannot read the inputs are sent each shard's files, read here as it is sent.
    blind = {worker for worker, check in zip(pool, checks) if not check["reaches"]}
    if blind:
        notice(f"the driver sends the images' files to {len(blind)} of {len(pool)} workers: they cannot read "
               f"{plan.folder}")
    queue = list(pending)
    attempts = {index: 0 for index in pending}
    running: dict = {}  # call -> (shard, worker)
    pings: dict = {}  # check call -> worker that failed: it gets work again once it answers
    load = {worker: 0 for worker in pool}  # shards in flight per worker still trusted

    def submit(worker) -> None:
        index = queue.pop(0)
        names = plan.shards[index]
        entries = [plan.entry(name) for name in names]
        contents = [inputs.read_bytes(entry.location) for entry in entries] if worker in blind else None
        # The entries as a tuple of tuples of their fields: Ray pickles that whole, where a list of
        # ImageEntry cost its serializer a Python call per item and a dataclass's pickling (three
        # times the driver's CPU per call).
        entry_fields = tuple(map(entry_values, entries))
        running[worker.fit.remote(index, entry_fields, [plan.row_of[name] for name in names], contents)] = \
            (index, worker)
        load[worker] += 1

    # A lost shard is sent again alone to an idle worker: the shards in flight beside it die with
    # it, so only a loss in isolation says for sure which shard kills its workers.
    suspect: set[int] = set()
    isolated: set = set()

    def fill() -> None:
        for worker in list(load):
            while queue and load[worker] < IN_FLIGHT and worker not in isolated:
                if queue[0] in suspect:
                    if load[worker]:
                        break
                    isolated.add(worker)
                submit(worker)

    fill()
    while running or (queue and pings):
        ready, _ = ray.wait(list(running) + list(pings), num_returns=1)
        if ready[0] in pings:  # a restarted worker answered: it is trusted again
            worker = pings.pop(ready[0])
            try:
                check = ray.get(ready[0])
                load.setdefault(worker, 0)
                if check["reaches"]:  # Ray may have restarted it on another node
                    blind.discard(worker)
                else:
                    blind.add(worker)
            except retryable:
                pings[worker.check.remote(sample)] = worker
            fill()
            continue
        index, worker = running.pop(ready[0])
        try:
            result = ray.get(ready[0])
        except retryable as exc:
            attempts[index] += 1
            suspect.add(index)
            isolated.discard(worker)
            names = plan.shards[index]
            if attempts[index] >= MAX_ATTEMPTS:
                listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
                raise InrError(f"shard {index} was lost {attempts[index]} times ({type(exc).__name__}); one of its "
                               f"images may crash the workers: "
                               f"{listed}. The finished shards are kept") from None
            notice(f"shard {index} was lost ({type(exc).__name__}: a worker or its node died); it is sent again")
            queue.insert(0, index)
            if worker in load:  # not trusted until Ray has it back
                del load[worker]
                pings[worker.check.remote(sample)] = worker
            if not load and not pings:
                raise InrError("every worker is gone; the finished shards are kept") from None
            fill()
            continue
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, InrError):  # a pack that diverged, an image that does not decode
                raise exc.cause from None
            raise InrError(f"shard {index} failed on a worker: {str(exc).strip().splitlines()[-1]}") from None
        if worker in load:
            load[worker] -= 1
        isolated.discard(worker)
        on_shard(index, result)
        hook("shard-written", shards=out.join(SHARDS))
        fill()
    if queue:
        raise InrError("no worker is left to fit the remaining shards; the finished shards are kept")



def _check(ray, worker, retryable, sample: tuple[str, int]) -> dict:
    """The worker's check; one that dies starting up is restarted by Ray and asked again."""
    for attempt in range(MAX_ATTEMPTS):
        try:
            return ray.get(worker.check.remote(sample))
        except retryable as exc:
            if attempt == MAX_ATTEMPTS - 1:
                raise InrError(f"a Ray worker died {MAX_ATTEMPTS} times while starting "
                               f"({type(exc).__name__})") from None
            notice(f"a Ray worker died while starting ({type(exc).__name__}); Ray restarts it")
