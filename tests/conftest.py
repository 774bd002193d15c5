"""Shared fixtures: a tiny random Gemma 3, the embedded 270M model, an MLflow store.

Every test runs with ``HF_HUB_OFFLINE=1`` and fails if it opens a network connection
to anything but loopback.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from pathlib import Path

import pytest
from hypothesis import settings

# Seed everything, property tests included: the same examples on every machine and every
# run, so a failure in CI reproduces here (a test may still ask for more examples).
settings.register_profile("seeded", derandomize=True, database=None, deadline=None)
settings.load_profile("seeded")

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_ASYNC_LOGGING", "false")

REPO = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------- network guard

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_loopback(address: object) -> bool:
    if isinstance(address, str | bytes):  # AF_UNIX path
        return True
    host = address[0] if isinstance(address, tuple) else address
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class NetworkAccessError(RuntimeError):
    pass


def _guarded(real):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise NetworkAccessError(f"test tried to reach {address!r}: only loopback is allowed")
        return real(self, address)

    return connect


@pytest.fixture(autouse=True, scope="session")
def _no_network():
    socket.socket.connect = _guarded(_real_connect)
    socket.socket.connect_ex = _guarded(_real_connect_ex)
    yield
    socket.socket.connect = _real_connect
    socket.socket.connect_ex = _real_connect_ex


# ---------------------------------------------------------------------------- CUDA


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` skip on a machine without a CUDA GPU (CI has none)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


# ---------------------------------------------------------------------------- tiny model

TINY_WORDS = (
    "the a an of to and in is it that was for on are with as at be this have from or one had by "
    "word but not what all were we when your can said there use each which she do how their if "
    "will up other about out many then them these so some her would make like him into time has "
    "look two more write go see number no way could people my than first water been call who oil "
    "its now find long down day did get come made may part dog cat bird fish tree herb shrub "
    "person change animal justice story tell me something here mammal genus order plant flower "
    "red blue green small big old new good bad happy sad run walk eat sleep house car city sea "
    "sky sun moon star book music art law court king queen child man woman friend food bread"
).split()


def build_tiny_tokenizer(extra_words: tuple[str, ...] = ()):
    """A word-level tokenizer built in-process: no files, no hub. ``extra_words`` (e.g. a
    concept file's names) get ids after the fixed vocabulary, which keeps its ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    punct = list(".,!?:;'\"()-")
    base = specials + punct + sorted(set(TINY_WORDS))
    extra = sorted(set(extra_words) - set(base))
    vocab = {tok: i for i, tok in enumerate(base + extra)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.normalizer = None
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tk.decoder = decoders.WordPiece(prefix="##")
    tk.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    tokenizer.padding_side = "left"
    return tokenizer


# The shape both tiny text models share: 4 layers of width 64, one KV head, the tiny
# tokenizer's special ids.
TINY_SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "max_position_embeddings": 512,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
}


def _build_tiny(config_class, model_class, seed: int, vocab_size: int, **extra):
    import torch

    torch.manual_seed(seed)
    config = config_class(vocab_size=vocab_size, **TINY_SHAPE, **extra)
    model = model_class(config).eval()
    model.generation_config.eos_token_id = 1
    return model


def build_tiny_gemma(seed: int = 0, vocab_size: int = 512):
    """A random Gemma 3 small enough for unit tests; vocab 512 covers the tiny tokenizer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    return _build_tiny(
        Gemma3TextConfig, Gemma3ForCausalLM, seed, vocab_size, head_dim=16, sliding_window=64
    )


def build_tiny_llama(seed: int = 0, vocab_size: int = 512):
    """A random Llama (SmolLM2's architecture: no sliding window, grouped KV heads, tied
    embeddings) at the tiny Gemma's size; vocab 512 covers the tiny tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return _build_tiny(LlamaConfig, LlamaForCausalLM, seed, vocab_size, tie_word_embeddings=True)


def tiny_multimodal_config():
    """Gemma 3 4B's class (``Gemma3ForConditionalGeneration``: text and SigLIP vision) at a
    tiny size, with the 4B's vocabulary of 262,208 rows (the embedded tokenizer's
    262,144 and the image tokens)."""
    from transformers import Gemma3Config

    return Gemma3Config(
        text_config={
            "vocab_size": 262_208,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "max_position_embeddings": 512,
            "sliding_window": 128,
            "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 28,
            "patch_size": 14,
            "vision_use_head": False,
        },
        mm_tokens_per_image=4,
    )


def build_tiny_multimodal(seed: int = 0):
    import torch
    from transformers import Gemma3ForConditionalGeneration

    torch.manual_seed(seed)
    return Gemma3ForConditionalGeneration(tiny_multimodal_config()).eval()


@contextlib.contextmanager
def _single_threaded():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def single_threaded():
    """``with single_threaded(): ...``: torch on one thread for the block, for fixtures of
    any scope. The tiny model's matmuls are too small to gain from threads, and on a busy
    shared 2-core machine two spinning OpenMP threads make them up to ~50x slower."""
    return _single_threaded


@pytest.fixture
def one_thread(single_threaded):
    """The test itself on one torch thread (see ``single_threaded``)."""
    with single_threaded():
        yield


@pytest.fixture(scope="session")
def tiny_lm():
    """A random 4-layer Gemma 3 (hidden 64) with a word-level tokenizer, built in ~20 ms."""
    from steering.models import wrap_model

    return wrap_model(build_tiny_gemma(), build_tiny_tokenizer(), "tiny-random-gemma3")


@pytest.fixture(scope="session")
def tiny_llama_lm():
    """A random 4-layer Llama (hidden 64) with the tiny word-level tokenizer: the second
    architecture the decode policies are held to the reference on."""
    from steering.models import wrap_model

    return wrap_model(build_tiny_llama(), build_tiny_tokenizer(), "tiny-random-llama")


@pytest.fixture
def tiny_lm_knowing():
    """The tiny model with a tokenizer that also knows ``words`` (lower-cased words of
    a concept file, say), so texts about concepts outside TINY_WORDS are not all
    <unk>: ``tiny_lm_knowing(words)``."""
    from steering.models import wrap_model

    def make(words):
        tokenizer = build_tiny_tokenizer(tuple(words))
        return wrap_model(build_tiny_gemma(), tokenizer, "tiny-random-gemma3-words")

    return make


@pytest.fixture
def make_tiny_lm():
    """Builds a fresh tiny model (for tests that change its config): ``make_tiny_lm(
    device="cpu", **config_attributes)``."""
    from steering.models import wrap_model

    def make(device: str = "cpu", **config):
        model = build_tiny_gemma()
        for name, value in config.items():
            setattr(model.config, name, value)
        return wrap_model(model.to(device), build_tiny_tokenizer(), f"tiny-random-gemma3-{device}")

    return make


# ---------------------------------------------------------------------------- embedded model


@pytest.fixture(scope="session")
def embedded_lm():
    """The embedded Gemma 3 270M (needs `make setup`; fails loudly otherwise)."""
    from steering.models import load_model

    return load_model("embedded")


def _tiny_multimodal_lm(device: str = "cpu"):
    from transformers import AutoTokenizer

    from steering.assets import require_embedded_model
    from steering.models import wrap_model

    tokenizer = AutoTokenizer.from_pretrained(require_embedded_model())
    model = build_tiny_multimodal().to(device)
    return wrap_model(model, tokenizer, f"tiny-random-gemma3-multimodal-{device}")


@pytest.fixture(scope="session")
def tiny_multimodal_lm():
    """A tiny random ``Gemma3ForConditionalGeneration`` with the embedded Gemma 3
    tokenizer (needs `make setup` for the tokenizer only)."""
    return _tiny_multimodal_lm()


@pytest.fixture
def make_tiny_multimodal_lm():
    """Builds the tiny multimodal model afresh on a device: ``make_tiny_multimodal_lm("cuda")``."""
    return _tiny_multimodal_lm


@pytest.fixture(scope="session")
def tiny_multimodal_json(tmp_path_factory):
    """The tiny multimodal config as a file, named ``tiny-gemma3-mm.json``."""
    path = tmp_path_factory.mktemp("configs") / "tiny-gemma3-mm.json"
    tiny_multimodal_config().to_json_file(path)
    return path


@pytest.fixture(scope="session")
def embedder():
    from metrics.embedder import load_embedder

    return load_embedder("embedded", "cpu")


# ---------------------------------------------------------------------------- MLflow


@pytest.fixture(scope="session")
def mlflow_store(tmp_path_factory):
    """A real MLflow sqlite store in a temporary folder, shared by the session."""
    root = tmp_path_factory.mktemp("mlflow")
    old = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_ARTIFACT_ROOT")}
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlruns.db'}"
    os.environ["MLFLOW_ARTIFACT_ROOT"] = str(root / "mlartifacts")
    yield root
    for key, value in old.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


# The tiny Phase 5 run the runs table, the views and the own-concepts tests read: 6 new
# tokens in batches of 16 at layer 2, one random arm, 200 bootstrap resamples.
TINY_PHASE5 = (
    "generation.max_new_tokens=6",
    "generation.batch_size=16",
    "layer=2",
    "controls.random_directions=1",
    "criteria.n_boot=200",
)


@pytest.fixture(scope="session")
def tiny_phase5_config():
    """``tiny_phase5_config(tmp, concepts="concepts.limit=3")``: ``configs/phase5.yaml``
    made tiny (``TINY_PHASE5``), its classifiers and results under ``tmp``; ``concepts``:
    the override that says which concepts."""
    from experiments.config import load_config

    def config(tmp: Path, concepts: str = "concepts.limit=3"):
        return load_config(
            "configs/phase5.yaml",
            [
                concepts,
                *TINY_PHASE5,
                f"classifier.dir={tmp / 'cls'}",
                f"tracking.results_dir={tmp / 'res'}",
            ],
        )

    return config


@pytest.fixture(scope="session")
def interrupted_run(mlflow_store):
    """``interrupted_run(start, experiment)``: call ``start(on_batch)`` with an
    ``on_batch`` that stops the run with Ctrl-C after its first batch, and return the id
    of the run it left KILLED in ``experiment``."""
    from experiments import tracking

    def interrupt(start, experiment: str) -> str:
        calls = {"n": 0}

        def after_first_batch(done: int, total: int) -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            start(after_first_batch)
        runs = tracking.client().search_runs(
            [tracking.experiment_id(experiment)],
            filter_string="attributes.status = 'KILLED'",
            order_by=["attributes.start_time DESC"],
        )
        return runs[0].info.run_id

    return interrupt


# ---------------------------------------------------------------------------- scale-out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tiny_lm):
    """The tiny Gemma 3 saved as a model folder: Ray workers load a model from a spec, so
    the driver and the actors both load it from here (the real ``load_model`` path)."""
    path = tmp_path_factory.mktemp("tiny-gemma")
    tiny_lm.model.save_pretrained(path)
    tiny_lm.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_from_dir(tiny_model_dir):
    from steering.models import load_model

    return load_model(str(tiny_model_dir), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def ray_cluster():
    """A 2-CPU Ray instance for one module; give test actors fractional CPUs (two actors
    holding a whole CPU each would leave nothing for anything else)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real ``mlflow server`` on loopback (sqlite store, proxied artefacts) for one
    module; MLFLOW_TRACKING_URI points at it meanwhile. Yields (uri, server root)."""
    from experiments.tracking.server import running_server

    root = tmp_path_factory.mktemp("mlflow-server")
    old = os.environ.get("MLFLOW_TRACKING_URI")
    with running_server(root) as uri:
        os.environ["MLFLOW_TRACKING_URI"] = uri
        try:
            yield uri, root
        finally:
            if old is None:
                os.environ.pop("MLFLOW_TRACKING_URI", None)
            else:
                os.environ["MLFLOW_TRACKING_URI"] = old
