"""What every weft.keras model does: compile, fit, evaluate, predict and its weights.

``BaseModel`` holds it for ``Sequential`` and the functional ``Model``
(weft.keras.models), which only say which layers the model has, in which
order and what each reads (``_layer_specs``).

``compile`` records the optimizer, loss, metrics and the strategy of the
enclosing ``strategy.scope()`` (else one replica). ``fit`` builds the
JobSpec (``to_job_spec``), sends NumPy arrays to the cluster once (see
weft.data), submits the job to the strategy's master, shows a progress bar
and calls the callbacks as the master reports the job's progress, and
returns a History. The model's weights stay on the cluster, in the job's
checkpoint (``checkpoint_path``); ``evaluate`` runs an evaluation job from
them, ``get_weights``/``save_weights`` fetch them through the master,
``predict`` runs the forward pass with them in a remote Session, and
``load_weights`` starts the next ``fit`` from a checkpoint.
"""
from __future__ import annotations

import os
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from weft import distribute, errors
from weft._pb import job_pb2
from weft.data import ArrayData, Dataset
from weft.keras import layers as layers_mod, losses, mixed_precision, optimizers
from weft.keras.callbacks import Callback, History
from weft.keras.inference import layer_name

_METRICS = {"accuracy", "acc", "sparse_categorical_accuracy"}


def _progress_bar(total: int, verbose: int):
    from tqdm import tqdm
    return tqdm(total=total or None, unit="step", disable=verbose == 0, dynamic_ncols=True, leave=True)


class BaseModel:
    """The training machinery of a model; subclasses give its layers (``_layer_specs``)."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a string, not {type(name).__name__}")
        self.name = name
        self.layers: List[layers_mod.Layer] = []
        self._input_shape: Optional[Tuple[int, ...]] = None
        self.optimizer = None
        self.loss = None
        self.metrics: List[str] = []
        self.strategy: Optional[distribute.Strategy] = None
        self.stop_training = False
        self.checkpoint_path: Optional[str] = None  # the last fit's newest checkpoint, on the cluster
        self.checkpoint_dir: Optional[str] = None
        self.trained_steps = 0
        self._resume_from: Optional[str] = None
        self.last_job_id: Optional[str] = None
        self._fit_job_id: Optional[str] = None
        self._fit_step = 0

    # ---- building ---------------------------------------------------------------

    def _layer_specs(self) -> List[Tuple[layers_mod.Layer, "job_pb2.LayerSpec"]]:
        """Each layer with its LayerSpec, in the ModelSpec's order: every layer
        after those it reads and the output last, and an output that reads one
        layer right after that layer."""
        raise NotImplementedError

    def compile(self, optimizer="adam", loss="sparse_categorical_crossentropy",
                metrics: Optional[Sequence[str]] = None) -> None:
        """Sets how the model trains; the strategy is the enclosing scope's."""
        self.optimizer = optimizers.get(optimizer)
        self.loss = losses.get(loss)
        metrics = list(metrics or [])
        for m in metrics:
            if not isinstance(m, str) or m.lower() not in _METRICS:
                raise ValueError(f"metrics: unknown metric {m!r}; weft reports 'accuracy'")
            if self.loss.regression:
                raise ValueError(f"metrics: {m!r} is for classes; a mean_squared_error model reports its loss")
        self.metrics = metrics
        self.strategy = distribute.get_strategy()
        self.precision_policy = mixed_precision.global_policy()

    def _reads_ids(self) -> bool:
        """Whether the model's input is token ids (an Embedding reads it): integer
        arrays are then ids, not 8-bit pixels to divide by 255."""
        from weft.keras.embedding_layers import Embedding
        return bool(self.layers) and isinstance(self.layers[0], Embedding)

    def _model_spec(self, input_shape) -> "job_pb2.ModelSpec":
        entries = self._layer_specs()
        if not entries:
            raise ValueError("the model has no layers")
        last = entries[-1][0]
        if self.loss.regression:
            return self._regression_spec(input_shape, entries)
        # The output activation the loss absorbs: a softmax, or a binary loss's sigmoid.
        squash, loss_name = ("sigmoid", "binary_crossentropy") if self.loss.binary else (
            "softmax", getattr(self.loss, "name", "sparse_categorical_crossentropy"))
        ends_in_softmax = getattr(last, "activation", None) == squash
        if not self.loss.from_logits:
            if not ends_in_softmax:
                raise ValueError(f"loss: {loss_name} without from_logits=True expects the last layer to end in a "
                                 f"{squash}; add activation='{squash}' or pass from_logits=True to the loss")
        elif ends_in_softmax:
            raise ValueError(f"loss: from_logits=True but the last layer ends in a {squash}")
        # The classifier: the last layer, or the Dense layer an output Activation reads (just before it).
        head = last if isinstance(last, layers_mod.Dense) else entries[-2][0] if (
            isinstance(last, layers_mod.Activation) and len(entries) > 1) else None
        if not isinstance(head, layers_mod.Dense):
            raise ValueError("the last layer must be a Dense layer with one unit per class")
        if self.loss.binary and head.units != 1:
            raise ValueError(f"loss: binary_crossentropy reads one logit per example; the last Dense layer has "
                             f"{head.units} units")
        spec = job_pb2.ModelSpec(input_shape=list(input_shape), num_classes=2 if self.loss.binary else head.units,
                                 loss=self.loss.to_proto())
        for layer, p in entries:
            if layer is last and ends_in_softmax:  # absorbed by the loss
                if isinstance(layer, layers_mod.Activation):
                    continue
                p.dense.activation = job_pb2.ACTIVATION_NONE
            spec.layer.append(p)
        return spec

    def _regression_spec(self, input_shape, entries) -> "job_pb2.ModelSpec":
        """A mean-squared-error model: its outputs are compared with the targets as they are."""
        last = entries[-1][0]
        if getattr(last, "activation", None) not in (None, "linear"):
            raise ValueError(f"loss: mean_squared_error compares the last layer's outputs with the targets as they "
                             f"are; its activation {last.activation!r} would bound them (leave it out)")
        spec = job_pb2.ModelSpec(input_shape=list(input_shape), loss=self.loss.to_proto())
        for _, p in entries:
            spec.layer.append(p)
        return spec

    def to_job_spec(self, dataset: "job_pb2.DatasetSpec", input_shape, *, batch_size: int, epochs: int,
                    steps: Optional[int] = None, validate_every: int = 0, seed: int = 1,
                    name: Optional[str] = None) -> "job_pb2.JobSpec":
        """The JobSpec ``fit`` submits (also for ``weft submit``: print it with text_format)."""
        if self.optimizer is None:
            raise RuntimeError("compile the model before training it (model.compile(...))")
        # Keras' gradient accumulation: an update every k batches, which weft
        # runs as one step of k micro-batches.
        k = self.optimizer.gradient_accumulation_steps
        job = job_pb2.JobSpec(name=name or self.name, batch_size=batch_size * k, epochs=epochs, seed=seed)
        job.model.CopyFrom(self._model_spec(input_shape))
        job.dataset.CopyFrom(dataset)
        job.optimizer.CopyFrom(self.optimizer.to_proto())
        if steps:
            job.steps = steps
        if validate_every > 0:
            job.eval.every_epochs = validate_every
        elif validate_every < 0:
            job.eval.skip = True
        job.strategy.CopyFrom(self.strategy.to_proto())
        mp = mixed_precision.to_proto(getattr(self, "precision_policy", mixed_precision.global_policy()), job_pb2)
        if mp is not None:
            job.mixed_precision.CopyFrom(mp)
        job.checkpoint.dir = f"python/{job.name}-{uuid.uuid4().hex[:12]}"
        if self._resume_from:
            job.checkpoint.resume_from = self._resume_from
        return job

    # ---- training ---------------------------------------------------------------

    def _data(self, x, y, validation_data, client, batch_size: int = 1):
        """(DatasetSpec, example shape or None, has validation) for fit's arguments."""
        if isinstance(x, (Dataset, job_pb2.DatasetSpec, str)):
            if y is not None:
                raise ValueError("y: a Dataset holds its labels; pass y only with arrays")
            ds = x if isinstance(x, Dataset) else Dataset(spec=x) if isinstance(x, job_pb2.DatasetSpec) \
                else Dataset(x)
            if validation_data not in (None, True, "test"):
                raise ValueError("validation_data: with a Dataset, pass validation_data='test' to evaluate on its "
                                 "test split after every epoch")
            return ds.to_proto(), None, validation_data is not None
        if x is None:
            raise ValueError("x: pass training data (NumPy arrays with y, or a weft.data.Dataset)")
        if y is None:
            raise ValueError("y: pass the labels of x")
        x_val = y_val = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("validation_data must be a tuple (x_val, y_val)")
            x_val, y_val = validation_data
            y_val = self.loss.labels(y_val, "validation_data's y")
        arrays = ArrayData(x, self.loss.labels(y), x_val, y_val, ids=self._reads_ids())
        if batch_size > arrays.train_examples:
            raise ValueError(f"batch_size {batch_size} is larger than the {arrays.train_examples} training examples")
        return arrays.upload(client), arrays.example_shape, x_val is not None

    def fit(self, x=None, y=None, batch_size: int = 32, epochs: int = 1, verbose: int = 1,
            callbacks: Optional[Sequence[Callback]] = None, validation_data=None, steps: Optional[int] = None,
            seed: int = 1, name: Optional[str] = None, timeout: Optional[float] = None) -> History:
        """Trains the model on the cluster; returns a History of its epochs.

        x: NumPy examples (with labels ``y``) or a ``weft.data.Dataset``.
        validation_data: ``(x_val, y_val)`` arrays (or ``"test"`` for a
        Dataset's test split), evaluated after every epoch.
        Raises JobFailedError / JobCancelledError when the job does not
        succeed; Ctrl-C cancels the job.
        """
        if self.optimizer is None:
            raise RuntimeError("compile the model before training it (model.compile(...))")
        _check_int("batch_size", batch_size, 1)
        _check_int("epochs", epochs, 1)
        _check_int("verbose", verbose, 0)
        _check_int("seed", seed, 0)
        if steps is not None:
            _check_int("steps", steps, 1)
        callbacks = list(callbacks or [])
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks must be weft.keras.callbacks.Callback objects, not {type(cb).__name__}")
        client = self.strategy.client
        dataset, example_shape, validate = self._data(x, y, validation_data, client, batch_size)
        input_shape = self._input_shape or example_shape
        if input_shape is None:
            raise ValueError("the first layer needs input_shape=(...) (or start with weft.keras.Input)")
        job = self.to_job_spec(dataset, input_shape, batch_size=batch_size, epochs=epochs, steps=steps,
                               validate_every=1 if validate else -1, seed=seed, name=name)
        history = History()
        self.stop_training = False
        for cb in [history] + callbacks:
            cb.set_model(self)
            cb.set_params({"epochs": epochs, "steps": steps, "verbose": verbose})
            cb.on_train_begin()
        self.last_job_id = client.submit(job)
        final = self._follow(client, self.last_job_id, [history] + callbacks, validate, verbose, timeout)
        self.checkpoint_path = final.checkpoint_path or None
        self._fit_job_id, self._fit_step = self.last_job_id, final.checkpoint_step if final.checkpoint_step > 0 else 0
        # The job's checkpoint directory (checkpoint_path is its newest step-* in it).
        self.checkpoint_dir = os.path.dirname(self.checkpoint_path) if self.checkpoint_path else None
        self.trained_steps = final.step
        self._trained = (job, input_shape)
        for cb in [history] + callbacks:
            cb.on_train_end(_logs(final, validate))
        return history

    def _follow(self, client, job_id, callbacks, validate, verbose, timeout):
        bar = _progress_bar(0, verbose)
        done_epochs, last = 0, None
        try:
            for st in client.watch(job_id, timeout=timeout):
                last = st
                if st.total_steps and bar.total != st.total_steps:
                    bar.total = st.total_steps
                bar.update(max(0, st.step - bar.n))
                if st.epochs:
                    bar.set_description(f"epoch {max(st.epoch, 1)}/{st.epochs}")
                bar.set_postfix(loss=f"{st.loss:.4f}")
                for cb in callbacks:
                    cb.on_train_batch_end(st.step, {"loss": st.loss})
                # Every epoch that ended since the last status, with its own
                # figures (statuses of fast epochs can replace one another).
                for end in st.epoch_end:
                    if end.epoch <= done_epochs:
                        continue
                    done_epochs = end.epoch
                    for cb in callbacks:
                        cb.on_epoch_end(end.epoch - 1, _epoch_logs(end, validate))
                if self.stop_training and not st.done:
                    client.cancel(job_id)
        except KeyboardInterrupt:
            client.cancel(job_id)
            raise
        finally:
            bar.close()
        if last is None or not last.done:
            last = client.status(job_id)
        if last.state == "CANCELLED" and self.stop_training:
            return last  # stopped by a callback: not an error
        last.raise_for_state()
        return last

    def evaluate(self, x=None, y=None, batch_size: int = 32, verbose: int = 1, return_dict: bool = False):
        """Loss and accuracy of the trained weights on (x, y), computed on the cluster.

        Runs an evaluation job that resumes from the last ``fit``'s
        checkpoint (it trains no further step).
        """
        if not self.checkpoint_path or not getattr(self, "_trained", None):
            raise RuntimeError("evaluate: the model has no trained weights yet (fit it first)")
        _check_int("batch_size", batch_size, 1)
        trained_job, input_shape = self._trained
        client = self.strategy.client
        if isinstance(x, (Dataset, job_pb2.DatasetSpec, str)):
            dataset, _, _ = self._data(x, y, None, client)
        else:
            if x is None or y is None:
                raise ValueError("x and y: pass the examples and labels to evaluate on")
            y = self.loss.labels(y)
            arrays = ArrayData(x, y, x, y, ids=self._reads_ids())
            dataset = arrays.upload(client)
        job = job_pb2.JobSpec()
        job.CopyFrom(trained_job)
        job.name = f"{trained_job.name}-evaluate"
        job.dataset.CopyFrom(dataset)
        job.ClearField("epochs")
        job.steps = self.trained_steps  # resumes at its last step: nothing left to train
        job.ClearField("eval")
        job.checkpoint.dir = f"python/{job.name}-{uuid.uuid4().hex[:12]}"
        job.checkpoint.resume_from = self.checkpoint_dir
        job_id = client.submit(job)
        final = client.wait(job_id)
        if final.test_loss < 0:
            raise errors.WeftError(f"evaluate: job {job_id} ended without evaluating")
        if self.loss.regression:
            return {"loss": final.test_loss} if return_dict else final.test_loss
        result = {"loss": final.test_loss, "accuracy": final.test_accuracy}
        return result if return_dict else [result["loss"], result["accuracy"]]

    def predict(self, x, batch_size: int = 256, verbose: int = 0):
        """Class probabilities (a regression's outputs) for examples ``x``, computed on the cluster.

        Runs the model's forward pass in a Session with the last fit's
        weights (read through the master, as get_weights). Integer examples are divided by the training
        data's scale, as fit's were; float examples are used as they are.
        """
        import numpy as np
        from weft.keras.inference import forward_graph
        from weft.session import Session
        _check_int("batch_size", batch_size, 1)
        if not getattr(self, "_trained", None):
            raise RuntimeError("predict: the model has no trained weights yet (fit it first)")
        job, input_shape = self._trained
        x = np.asarray(x)
        if x.ndim < 1 or x.size == 0:
            raise ValueError(f"x must hold at least one example, got shape {x.shape}")
        per_example = int(np.prod(input_shape))
        if x.size % per_example or x.shape[0] * per_example != x.size:
            raise ValueError(f"x: examples of shape {x.shape[1:]} do not have the model's {per_example} values each")
        feed = x.astype(np.float32) / job.dataset.scale if x.dtype.kind in "iu" else x.astype(np.float32)
        feed = feed.reshape((x.shape[0],) + tuple(input_shape))
        g, inp, probs = forward_graph(job.model, self.get_weights())
        out = []
        with Session(self.strategy.client, graph=g) as sess:
            for at in range(0, len(feed), batch_size):
                out.append(sess.run(probs, {inp: feed[at:at + batch_size]}))
        return np.concatenate(out)

    def load_weights(self, checkpoint: str) -> None:
        """Starts the next ``fit`` from a checkpoint directory on the cluster.

        ``checkpoint``: another fit's ``checkpoint_path`` (or a job's
        checkpoint dir, relative to the master's checkpoint root).
        """
        if not isinstance(checkpoint, str) or not checkpoint:
            raise ValueError("checkpoint: name a checkpoint directory on the cluster")
        self._resume_from = checkpoint

    def save_weights(self, path: str) -> str:
        """Writes the last fit's trained variables to a NumPy ``.npz`` file; returns its path."""
        import numpy as np
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a file name, not {type(path).__name__}")
        path = str(path) if str(path).endswith(".npz") else f"{path}.npz"  # as np.savez names it
        np.savez(path, **self.get_weights())
        return path

    def get_weights(self) -> Dict[str, Any]:
        """The last fit's trained variables by name (NumPy arrays), read through the master.

        Optimizer slots are left out; mirrored replicas' copies appear once.
        """
        if not self._fit_job_id:
            raise RuntimeError("get_weights: the model has no trained weights yet (fit it first)")
        variables = self.strategy.client.read_checkpoint(self._fit_job_id, step=self._fit_step)
        return {k: v for k, v in _model_variables(variables).items() if not k.startswith("optimizer/")}

    def summary(self) -> str:
        """Prints (and returns) the layers with their names in the ModelSpec and what each reads."""
        lines = [f'Model "{self.name}"', f"input shape {self._input_shape}"]
        for i, (layer, spec) in enumerate(self._layer_specs()):
            reads = f" <- {', '.join(spec.inputs)}" if spec.inputs else ""
            lines.append(f"  {layer_name(spec, i)}: {type(layer).__name__}{reads}")
        text = "\n".join(lines)
        print(text)
        return text


def _model_variables(variables: Dict[str, Any]) -> Dict[str, Any]:
    """A checkpoint's variables by their model names: mirrored strategies keep
    one identical copy per replica ("replica_<k>/<name>"); replica 0's is
    the model's."""
    out = {}
    for name, value in variables.items():
        if name.startswith("replica_"):
            replica, _, rest = name.partition("/")
            if replica != "replica_0":
                continue
            name = rest
        out[name] = value
    return out


def _epoch_logs(end, validate: bool) -> Dict[str, float]:
    """Keras' epoch logs from one JobStatus.epoch_end entry."""
    return _figures(end.train_loss, end, validate)


def _logs(st, validate: bool) -> Dict[str, float]:
    """Keras' logs from a whole status (the run's end)."""
    return _figures(st.train_loss if st.train_loss else st.loss, st, validate)


def _figures(loss: float, evaluated, validate: bool) -> Dict[str, float]:
    # A regression has a val_loss and no accuracy; -1 is "not evaluated".
    logs = {"loss": loss}
    if validate:
        if evaluated.test_accuracy >= 0:
            logs["val_accuracy"] = evaluated.test_accuracy
        if evaluated.test_loss >= 0:
            logs["val_loss"] = evaluated.test_loss
    return logs


def _check_int(name: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
