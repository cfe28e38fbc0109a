"""Public names and signatures against the spec (../shared/spec): the signature lines below
are the spec's method headings, written out literally."""

import importlib
import inspect

import pytest

SPEC_SIGNATURES = [
    ("rlpolicy.policy.policy:Policy", "__init__(self, observation_space, action_space, config)"),
    ("rlpolicy.policy.policy:Policy", "apply_gradients(self, gradients)"),
    (
        "rlpolicy.policy.policy:Policy",
        "compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None, prev_reward_batch=None, info_batch=None, episodes=None, explore=None, timestep=None, **kwargs)",
    ),
    (
        "rlpolicy.policy.policy:Policy",
        "compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, episodes=None, **kwargs)",
    ),
    ("rlpolicy.policy.policy:Policy", "compute_gradients(self, postprocessed_batch)"),
    (
        "rlpolicy.policy.policy:Policy",
        "compute_log_likelihoods(self, actions, obs_batch, state_batches=None, prev_action_batch=None, prev_reward_batch=None, actions_normalized=True)",
    ),
    (
        "rlpolicy.policy.policy:Policy",
        "compute_single_action(self, obs=None, state=None, *, prev_action=None, prev_reward=None, info=None, input_dict=None, episode=None, explore=None, timestep=None, **kwargs)",
    ),
    ("rlpolicy.policy.policy:Policy", "export_checkpoint(self, export_dir)"),
    ("rlpolicy.policy.policy:Policy", "export_model(self, export_dir, onnx=None)"),
    ("rlpolicy.policy.policy:Policy", "get_exploration_state(self)"),
    ("rlpolicy.policy.policy:Policy", "get_initial_state(self)"),
    ("rlpolicy.policy.policy:Policy", "get_num_samples_loaded_into_buffer(self, buffer_index=0)"),
    ("rlpolicy.policy.policy:Policy", "get_session(self)"),
    ("rlpolicy.policy.policy:Policy", "get_state(self)"),
    ("rlpolicy.policy.policy:Policy", "get_weights(self)"),
    ("rlpolicy.policy.policy:Policy", "is_recurrent(self)"),
    ("rlpolicy.policy.policy:Policy", "learn_on_batch(self, samples)"),
    ("rlpolicy.policy.policy:Policy", "learn_on_loaded_batch(self, offset=0, buffer_index=0)"),
    ("rlpolicy.policy.policy:Policy", "load_batch_into_buffer(self, batch, buffer_index=0)"),
    ("rlpolicy.policy.policy:Policy", "loss(self, model, dist_class, train_batch)"),
    ("rlpolicy.policy.policy:Policy", "num_state_tensors(self)"),
    ("rlpolicy.policy.policy:Policy", "on_global_var_update(self, global_vars)"),
    (
        "rlpolicy.policy.policy:Policy",
        "postprocess_trajectory(self, sample_batch, other_agent_batches=None, episode=None)",
    ),
    ("rlpolicy.policy.policy:Policy", "set_state(self, state)"),
    ("rlpolicy.policy.policy:Policy", "set_weights(self, weights)"),
    (
        "rlpolicy.policy.torch_policy:TorchPolicy",
        "__init__(self, observation_space, action_space, config, *, model=None, loss=None, action_distribution_class=None, action_sampler_fn=None, action_distribution_fn=None, max_seq_len=20, get_batch_divisibility_req=None)",
    ),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "apply_gradients(self, gradients)"),
    (
        "rlpolicy.policy.torch_policy:TorchPolicy",
        "compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None, prev_reward_batch=None, info_batch=None, episodes=None, explore=None, timestep=None, **kwargs)",
    ),
    (
        "rlpolicy.policy.torch_policy:TorchPolicy",
        "compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, **kwargs)",
    ),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "export_checkpoint(self, export_dir)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "export_model(self, export_dir, onnx=None)"),
    (
        "rlpolicy.policy.torch_policy:TorchPolicy",
        "extra_action_out(self, input_dict, state_batches, model, action_dist)",
    ),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "extra_compute_grad_fetches(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "extra_grad_info(self, train_batch)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "extra_grad_process(self, optimizer, loss)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "get_initial_state(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "get_num_samples_loaded_into_buffer(self, buffer_index=0)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "get_state(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "get_tower_stats(self, stats_name)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "get_weights(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "is_recurrent(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "learn_on_loaded_batch(self, offset=0, buffer_index=0)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "load_batch_into_buffer(self, batch, buffer_index=0)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "num_state_tensors(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "optimizer(self)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "set_state(self, state)"),
    ("rlpolicy.policy.torch_policy:TorchPolicy", "set_weights(self, weights)"),
]

SPEC_SIGNATURES.append(
    (
        "rlpolicy.policy.policy_template:build_policy_class",
        "build_policy_class(name, framework, *, loss_fn, get_default_config=None, stats_fn=None, "
        "postprocess_fn=None, extra_action_out_fn=None, extra_grad_process_fn=None, "
        "extra_learn_fetches_fn=None, optimizer_fn=None, validate_spaces=None, before_init=None, "
        "before_loss_init=None, after_init=None, _after_loss_init=None, action_sampler_fn=None, "
        "action_distribution_fn=None, make_model=None, make_model_and_action_dist=None, "
        "compute_gradients_fn=None, apply_gradients_fn=None, mixins=None, get_batch_divisibility_req=None)",
    )
)

SPEC_SIGNATURES += [
    (
        "rlpolicy.policy.tf_policy:TFPolicy",
        "__init__(self, observation_space, action_space, config, sess, obs_input, sampled_action, loss, loss_inputs, model=None, sampled_action_logp=None, action_input=None, log_likelihood=None, dist_inputs=None, dist_class=None, state_inputs=None, state_outputs=None, prev_action_input=None, prev_reward_input=None, seq_lens=None, max_seq_len=20, batch_divisibility_req=1, update_ops=None, explore=None, timestep=None)",
    ),
    ("rlpolicy.policy.tf_policy:TFPolicy", "apply_gradients(self, gradients)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "build_apply_op(self, optimizer, grads_and_vars)"),
    (
        "rlpolicy.policy.tf_policy:TFPolicy",
        "compute_actions(self, obs_batch, state_batches=None, prev_action_batch=None, prev_reward_batch=None, info_batch=None, episodes=None, explore=None, timestep=None, **kwargs)",
    ),
    (
        "rlpolicy.policy.tf_policy:TFPolicy",
        "compute_actions_from_input_dict(self, input_dict, explore=None, timestep=None, episodes=None, **kwargs)",
    ),
    ("rlpolicy.policy.tf_policy:TFPolicy", "compute_gradients(self, postprocessed_batch)"),
    (
        "rlpolicy.policy.tf_policy:TFPolicy",
        "compute_log_likelihoods(self, actions, obs_batch, state_batches=None, prev_action_batch=None, prev_reward_batch=None, actions_normalized=True)",
    ),
    ("rlpolicy.policy.tf_policy:TFPolicy", "copy(self, existing_inputs)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "export_checkpoint(self, export_dir, filename_prefix='model')"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "export_model(self, export_dir, onnx=None)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "extra_compute_action_feed_dict(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "extra_compute_action_fetches(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "extra_compute_grad_feed_dict(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "extra_compute_grad_fetches(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "get_exploration_state(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "get_placeholder(self, name)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "get_session(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "get_state(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "get_weights(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "gradients(self, optimizer, loss)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "is_recurrent(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "learn_on_batch(self, postprocessed_batch)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "loss_initialized(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "num_state_tensors(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "optimizer(self)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "set_state(self, state)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "set_weights(self, weights)"),
    ("rlpolicy.policy.tf_policy:TFPolicy", "variables(self)"),
]


def _format(name, sig):
    parts, kw_marked = [], False
    for p in sig.parameters.values():
        if p.kind is p.KEYWORD_ONLY and not kw_marked:
            parts.append("*")
            kw_marked = True
        if p.kind is p.VAR_POSITIONAL:
            kw_marked = True
            parts.append(f"*{p.name}")
        elif p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.default is p.empty:
            parts.append(p.name)
        else:
            parts.append(f"{p.name}={p.default!r}")
    return f"{name}({', '.join(parts)})"


def _resolve(target, heading):
    module, qual = target.split(":")
    obj = getattr(importlib.import_module(module), qual)
    name = heading.split("(")[0]
    return obj if name == qual else getattr(obj, name)


@pytest.mark.parametrize(
    "target,heading",
    SPEC_SIGNATURES,
    ids=[f"{t.split(':')[1]}.{h.split('(')[0]}" for t, h in SPEC_SIGNATURES],
)
def test_signature_matches_spec(target, heading):
    if "torch" in target:
        pytest.importorskip("torch")
    if "tf_policy" in target:
        pytest.importorskip("tensorflow")
    func = _resolve(target, heading)
    got = _format(heading.split("(")[0], inspect.signature(func))
    if got == heading:
        return
    # A superset is allowed only as extra *optional* parameters after the spec's own ones.
    spec_params = heading[heading.index("(") + 1 : -1].split(", ")
    got_params = got[got.index("(") + 1 : -1].split(", ")
    tail = [p for p in got_params if p not in spec_params]
    assert [p for p in got_params if p in spec_params] == spec_params, f"{got} != {heading}"
    assert all("=" in p or p.startswith("**") for p in tail), f"{got} adds required params to {heading}"
