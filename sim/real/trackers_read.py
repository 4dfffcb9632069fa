"""Reads what the program wrote for a tracker back with the tracker's own
library and prints it as JSON on stdout, for sim/real/trackers_test.go:

  trackers_read.py tensorboard LOGDIR   {"scalars": {tag: [[step, value], ...]}, "texts": {tag: [step, ...]}}
  trackers_read.py wandb RUN_FILE       {"run": {...}, "history": [{key: value, ...}, ...], "exit": code|null, "summary": {...}}
  trackers_read.py mlflow URI RUN_ID    {"run": {...}, "params": {...}, "metrics": {key: [[step, value], ...]}, "artifacts": [...]}

Each uses only the library's public readers: TensorBoard's
EventAccumulator (keeping every scalar; it applies the purge a SessionLog
START asks for), wandb's DataStore and Record protobufs, MLflow's client.
"""
import json
import sys


def tensorboard(logdir):
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(logdir, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0}, purge_orphaned_data=True)
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]}
    texts = {t: [e.step for e in acc.Tensors(t)] for t in tags.get("tensors", [])}
    return {"scalars": scalars, "texts": texts}


def wandb(path):
    from wandb.proto import wandb_internal_pb2 as pb
    from wandb.sdk.internal import datastore

    ds = datastore.DataStore()
    ds.open_for_scan(path)
    out = {"run": None, "history": [], "summary": {}, "exit": None, "kinds": []}
    while True:
        data = ds.scan_data()
        if data is None:
            break
        rec = pb.Record()
        rec.ParseFromString(data)
        kind = rec.WhichOneof("record_type")
        out["kinds"].append(kind)
        if kind == "run":
            r = rec.run
            out["run"] = {"run_id": r.run_id, "project": r.project, "display_name": r.display_name,
                          "config": {i.key: json.loads(i.value_json) for i in r.config.update},
                          "mailbox_slot": rec.control.mailbox_slot, "start": r.start_time.seconds}
        elif kind == "history":
            out["history"].append({i.key: json.loads(i.value_json) for i in rec.history.item})
        elif kind == "summary":
            out["summary"].update({i.key: json.loads(i.value_json) for i in rec.summary.update})
        elif kind == "exit":
            out["exit"] = rec.exit.exit_code
    ds.close()
    return out


def mlflow(uri, run_id):
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=uri)
    run = c.get_run(run_id)
    metrics = {}
    for key in run.data.metrics:
        metrics[key] = [[m.step, m.value] for m in c.get_metric_history(run_id, key)]
    arts = [a.path for a in c.list_artifacts(run_id)]
    return {"run": {"status": run.info.status, "name": run.info.run_name, "experiment_id": run.info.experiment_id},
            "params": dict(run.data.params), "tags": dict(run.data.tags), "metrics": metrics, "artifacts": arts}


if __name__ == "__main__":
    kind, args = sys.argv[1], sys.argv[2:]
    json.dump({"tensorboard": tensorboard, "wandb": wandb, "mlflow": mlflow}[kind](*args), sys.stdout)
