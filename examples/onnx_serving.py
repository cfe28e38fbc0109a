"""Export a policy's model to ONNX and serve it with onnxruntime.

``TorchPolicy.export_model(export_dir, onnx=11)`` writes ``model.onnx``
(opset 11). The graph takes one input per model column ("obs" here), the
RNN state inputs "state_in_<i>" (a non-recurrent model gets one dummy state
input) and "seq_lens" (the ONNX exporter drops inputs the graph never reads,
so a feed-forward model's graph has no "seq_lens"); it returns "output" (the action-distribution inputs,
here the logits) and "state_out_<i>". Axis 0 of every input is the batch.

The serving side below needs only numpy and onnxruntime. Its greedy actions
are compared with the policy's own ``compute_actions(..., explore=False)``.

Run:  python examples/onnx_serving.py [--batch N]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import gymnasium as gym
import numpy as np


def build_and_export(export_dir):
    """Builds a small CartPole policy and exports it (the torch side)."""
    import torch

    from rlpolicy.policy.torch_policy import TorchPolicy

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    policy = TorchPolicy(env.observation_space, env.action_space, {"model": {"fcnet_hiddens": [32, 32]}})
    policy.export_model(export_dir, onnx=11)
    print("exported:", sorted(os.listdir(export_dir)))
    return policy, env


class OnnxPolicyServer:
    """Greedy actions from an exported ``model.onnx`` (no torch needed)."""

    def __init__(self, export_dir):
        import onnxruntime as ort

        self.session = ort.InferenceSession(
            os.path.join(export_dir, "model.onnx"), providers=["CPUExecutionProvider"]
        )
        self.inputs = {i.name: i for i in self.session.get_inputs()}

    def logits(self, obs):
        n = len(obs)
        feed = {"obs": obs.astype(np.float32)}
        for name, info in self.inputs.items():
            if name.startswith("state_in_"):
                # Non-recurrent model: a dummy state, one row per observation.
                feed[name] = np.zeros([n, *info.shape[1:]], np.float32)
            elif name == "seq_lens":
                feed[name] = np.ones(n, np.int32)
        return self.session.run(["output"], feed)[0]

    def actions(self, obs):
        return self.logits(obs).argmax(axis=-1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as export_dir:
        policy, env = build_and_export(export_dir)
        server = OnnxPolicyServer(export_dir)
        print("onnx inputs:", list(server.inputs), "outputs:", [o.name for o in server.session.get_outputs()])
        obs = np.stack([env.observation_space.sample() for _ in range(args.batch)])
        onnx_logits = server.logits(obs)
        actions, _, extra = policy.compute_actions(obs, explore=False)
        diff = np.abs(onnx_logits - extra["action_dist_inputs"]).max()
        print(f"batch={args.batch} max |onnx - torch| logits: {diff:.2e}")
        print("greedy actions match:", bool(np.array_equal(server.actions(obs), actions)))


if __name__ == "__main__":
    main()
