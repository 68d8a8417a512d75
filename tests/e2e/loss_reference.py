#!/usr/bin/env python3
"""Plain-PyTorch reference of slime's loss formulas (slime_behaviour.md §8), for parity.

    python3 tests/e2e/loss_reference.py cases.json results.json

tests/cpp/torch/test_loss_parity.cpp writes `cases.json` (deterministic random inputs
for every loss path), runs this script once, and compares the loss, every metric and
the gradients with rlhost's C++ (runtime/trainer/losses.cpp) to 1e-5.

Written from the formulas, not from the C++: everything runs in float64, sample by
sample as slime does (lists of per-sample tensors), with its own choice of ops
(where() instead of maximum(), Python loops for the discounted returns). A case is a
dict {name, kind, options, inputs}; inputs are {"shape": [...], "data": [flat]}.
Kinds: kl, advantages (ppo: GAE over the critic's values), whiten, reduce, loss,
value_loss (the critic's clipped value loss), model (a tiny Llama through transformers).
The results file maps each case name to {key: tensor}; keys are "loss",
"metric/<name>", "grad/<input or parameter>", and per kind "kl", "advantages", ...

Exit status 77 (the automake "skipped" convention) when torch cannot be imported; a
model case is listed under "skipped" when transformers cannot be imported.
"""
import json
import sys

try:
    import torch
except Exception as e:  # pragma: no cover - depends on the machine
    print("loss_reference.py: torch is not importable (%r); parity checks skipped" % (e,), file=sys.stderr)
    sys.exit(77)

DT = torch.float64


def tensor(spec, dtype=DT):
    return torch.tensor(spec["data"], dtype=dtype).reshape(spec["shape"])


def out(t):
    t = t.detach().to(DT)
    return {"shape": list(t.shape), "data": t.reshape(-1).tolist()}


# ---- §8.2 KL estimators ------------------------------------------------------------
def approx_kl(logp, base, kind, importance_ratio=None):
    log_r = logp - base
    if kind == "k1":
        kl = log_r
    elif kind == "k2":
        kl = log_r ** 2 / 2
    elif kind in ("k3", "low_var_kl"):
        kl = torch.exp(-log_r) - 1 + log_r
    else:
        raise ValueError(kind)
    if importance_ratio is not None:
        kl = importance_ratio * kl
    if kind == "low_var_kl":
        kl = torch.clamp(kl, -10, 10)
    return kl


# ---- §8.5 aggregation, over per-sample rows ----------------------------------------
class Reducer:
    def __init__(self, mask, aggregation, sample_denoms=None, divisor=0.0):
        self.rows = [mask[i] for i in range(mask.shape[0])]
        self.aggregation = aggregation
        self.denoms = None if sample_denoms is None else [float(d) for d in sample_denoms]
        self.divisor = divisor

    def __call__(self, x):
        terms = []
        if self.aggregation == "sample_mean":
            for i, m in enumerate(self.rows):
                d = float(m.sum()) if self.denoms is None else self.denoms[i]
                terms.append((x[i] * m).sum() / max(d, 1.0))
            div = self.divisor if self.divisor > 0 else max(len(self.rows), 1)
        elif self.aggregation == "token_mean":
            for i, m in enumerate(self.rows):
                terms.append((x[i] * m).sum())
            div = self.divisor if self.divisor > 0 else max(sum(max(float(m.sum()), 1.0) for m in self.rows), 1.0)
        else:
            raise ValueError(self.aggregation)
        return torch.stack(terms).sum() / div if terms else torch.zeros((), dtype=DT)


# ---- §8.3 advantages -----------------------------------------------------------------
def whiten(a, mask):
    n = mask.sum()
    mean = (a * mask).sum() / n
    var = ((a * a * mask).sum() / n - mean ** 2) * n / (n - 1)
    return (a - mean) / torch.sqrt(var + 1e-8) * (mask != 0)


def gae(rewards, values, gamma, lambd):
    """One response: delta_t = r_t + gamma*V_{t+1} - V_t (V after the last token = 0),
    A_t = delta_t + gamma*lambd*A_{t+1}; returns A and A + V."""
    n = rewards.shape[0]
    adv = [None] * n
    following = torch.zeros((), dtype=DT)
    for t in range(n - 1, -1, -1):
        v_next = values[t + 1] if t + 1 < n else torch.zeros((), dtype=DT)
        following = rewards[t] + gamma * v_next - values[t] + gamma * lambd * following
        adv[t] = following
    adv = torch.stack(adv)
    return adv, adv + values


def ppo_advantages(opts, rewards, mask, kl, values, lengths):
    """slime's ppo: per-token rewards -kl_coef*kl over the whole response, the sequence
    reward added on its last token, GAE over the response (padding past it ignored)."""
    B, T = mask.shape
    advs, rets = [], []
    for i in range(B):
        n = int(lengths[i])
        r = -opts["kl_coef"] * kl[i, :n].clone()
        r[n - 1] = r[n - 1] + rewards[i]
        a, ret = gae(r, values[i, :n], opts["gamma"], opts["lambd"])
        pad = torch.zeros(T - n, dtype=DT)
        advs.append(torch.cat([a, pad]) * (mask[i] != 0))
        rets.append(torch.cat([ret, pad]) * (mask[i] != 0))
    adv, returns = torch.stack(advs), torch.stack(rets)
    if opts["normalize"]:
        adv = whiten(adv, mask)
    return adv, returns


def advantages(opts, rewards, mask, kl, values=None, lengths=None):
    est, kl_coef, gamma = opts["estimator"], opts["kl_coef"], opts["gamma"]
    B, T = mask.shape
    if kl is None or kl_coef == 0:
        kl = torch.zeros_like(mask)
    if est == "ppo":
        return ppo_advantages(opts, rewards, mask, kl, values, lengths)
    rows = []
    for i in range(B):
        m = mask[i]
        if est in ("grpo", "gspo", "cispo"):
            ret = torch.ones(T, dtype=DT) * rewards[i]
        elif est == "reinforce_plus_plus":
            r = -kl_coef * kl[i] * m
            nz = (m != 0).nonzero()
            if len(nz):
                r[int(nz[-1])] += rewards[i]
            ret = torch.zeros(T, dtype=DT)
            running = 0.0
            for t in reversed(range(T)):
                running = r[t] + gamma * running
                ret[t] = running
        elif est == "reinforce_plus_plus_baseline":
            ret = rewards[i] - kl_coef * kl[i]
        else:
            raise ValueError(est)
        rows.append(ret * (m != 0))
    returns = torch.stack(rows)
    adv = whiten(returns, mask) if opts["normalize"] else returns
    return adv, returns


# ---- §8.4 policy loss -----------------------------------------------------------------
def policy_loss(o, logp, mask, advantages=None, old_logp=None, entropy=None, ref_logp=None, rollout_logp=None,
                sample_denoms=None):
    red = Reducer(mask, o["aggregation"], sample_denoms, o.get("divisor", 0.0))
    metrics = {}
    if o["sft"]:
        loss = -red(logp)
        return loss, {"loss": loss}
    old = logp.detach() if old_logp is None else old_logp
    A = advantages
    lo = 1 - o["eps_clip"]
    hi = 1 + (o["eps_clip"] if o.get("eps_clip_high") is None else o["eps_clip_high"])

    ppo_kl = old - logp
    if o["estimator"] == "gspo":
        per_seq = [((old[i] - logp[i]) * mask[i]).sum() / torch.clamp_min(mask[i].sum(), 1)
                   for i in range(mask.shape[0])]
        ppo_kl = torch.stack([s.expand(mask.shape[1]) for s in per_seq])
    ratio = torch.exp(-ppo_kl)

    if o["estimator"] == "cispo":
        clipped = torch.clamp(ratio, lo, hi).detach()
        pg = -clipped * A * logp
        clipfrac = (clipped != ratio).to(DT)
    else:
        surr = -ratio * A
        surr_clipped = -torch.clamp(ratio, lo, hi) * A
        pg = torch.where(surr_clipped > surr, surr_clipped, surr)
        clipfrac = (surr_clipped > surr).to(DT)
        if o.get("eps_clip_c") is not None:
            cap = -o["eps_clip_c"] * A
            pg = torch.where((A < 0) & (cap < pg), cap, pg)

    if o["use_tis"]:
        tis = torch.exp(old - rollout_logp)
        low, high = o["tis_clip_low"], o["tis_clip"]
        if o["tis_mode"] == "icepop":
            w = tis * ((tis >= low) & (tis <= high)).to(DT)
        else:
            w = torch.clamp(tis, low, high)
        pg = pg * w
        metrics.update(tis=red(tis), tis_clipfrac=red((w != tis).to(DT)), tis_abs=red((tis - 1).abs()),
                       ois=red(ratio), tis_weight=red(w), tis_weight_sq=red(w * w))

    pg_loss = red(pg)
    loss = pg_loss
    metrics.update(pg_loss=pg_loss, pg_clipfrac=red(clipfrac), ppo_kl=red(ppo_kl))
    if entropy is not None:
        entropy_loss = red(entropy)
        loss = loss - o["entropy_coef"] * entropy_loss
        metrics["entropy_loss"] = entropy_loss
    if o["use_kl_loss"]:
        ir = torch.exp(logp - old) if o["use_unbiased_kl"] else None
        kl_loss = red(approx_kl(logp, ref_logp, o["kl_loss_type"], ir))
        loss = loss + o["kl_loss_coef"] * kl_loss
        metrics["kl_loss"] = kl_loss
    if rollout_logp is not None:
        # the behaviour (old) log-probs against the engine's, as slime reports it
        metrics["train_rollout_logprob_abs_diff"] = red((old - rollout_logp).abs())
    metrics["loss"] = loss
    return loss, metrics


# ---- the critic's value loss -------------------------------------------------------------
def value_loss(o, values, old_values, returns, mask):
    """max of the squared errors of V and of V clipped to V_old +- value_clip, reduced like
    the policy loss; clipfrac: share of tokens where |V - V_old| > value_clip."""
    red = Reducer(mask, o["aggregation"], None, o.get("divisor", 0.0))
    clip = o["value_clip"]
    v_clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    unclipped = (values - returns) ** 2
    clipped = (v_clipped - returns) ** 2
    per_token = torch.where(clipped > unclipped, clipped, unclipped)
    loss = red(per_token)
    clipfrac = red(((values - old_values).abs() > clip).to(DT))
    return loss, {"value_loss": loss, "value_clipfrac": clipfrac}


def loss_outputs(loss, metrics, grads):
    res = {"loss": out(loss)}
    res.update({"metric/" + k: out(v) for k, v in metrics.items()})
    res.update({"grad/" + k: out(g) for k, g in grads.items()})
    return res


def opt_tensor(inputs, name):
    return tensor(inputs[name]) if name in inputs else None


def run_loss(o, inputs):
    logp = tensor(inputs["logp"]).requires_grad_(True)
    entropy = opt_tensor(inputs, "entropy")
    if entropy is not None:
        entropy.requires_grad_(True)
    mask = tensor(inputs["mask"])
    denoms = opt_tensor(inputs, "sample_denoms")
    loss, metrics = policy_loss(o, logp, mask, opt_tensor(inputs, "advantages"), opt_tensor(inputs, "old_logp"),
                                entropy, opt_tensor(inputs, "ref_logp"), opt_tensor(inputs, "rollout_logp"),
                                None if denoms is None else denoms.tolist())
    loss.backward()
    grads = {"logp": logp.grad if logp.grad is not None else torch.zeros_like(logp)}
    if entropy is not None:
        grads["entropy"] = entropy.grad if entropy.grad is not None else torch.zeros_like(entropy)
    return loss_outputs(loss, metrics, grads)


def run_model(o, inputs):
    import transformers  # raises ImportError: the caller records the case as skipped

    model = transformers.AutoModelForCausalLM.from_pretrained(o["model_dir"], dtype=DT, attn_implementation="eager")
    model.train()  # dropout is 0 in these configs; train() only matters for the graph
    ids = torch.tensor(inputs["input_ids"]["data"], dtype=torch.int64).reshape(inputs["input_ids"]["shape"])
    logits = model(ids).logits[:, :-1] / o["temperature"]
    logsm = torch.log_softmax(logits, -1)
    logp = logsm.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logsm.exp() * logsm).sum(-1)
    loss, metrics = policy_loss(o, logp, tensor(inputs["mask"]), tensor(inputs["advantages"]),
                                tensor(inputs["old_logp"]), entropy, tensor(inputs["ref_logp"]))
    loss.backward()
    params = dict(model.named_parameters())
    res = loss_outputs(loss, metrics, {p: params[p].grad for p in o["params"]})
    res["logp"] = out(logp)
    res["entropy"] = out(entropy)
    return res


def run_case(case):
    kind, o, inputs = case["kind"], case.get("options", {}), case["inputs"]
    if kind == "kl":
        ratio = opt_tensor(inputs, "importance_ratio")
        return {"kl": out(approx_kl(tensor(inputs["logp"]), tensor(inputs["logp_base"]), o["type"], ratio))}
    if kind == "advantages":
        adv, ret = advantages(o, tensor(inputs["rewards"]), tensor(inputs["mask"]), opt_tensor(inputs, "kl"),
                              opt_tensor(inputs, "values"), opt_tensor(inputs, "response_lengths"))
        return {"advantages": out(adv), "returns": out(ret)}
    if kind == "whiten":
        return {"whiten": out(whiten(tensor(inputs["a"]), tensor(inputs["mask"])))}
    if kind == "reduce":
        x = tensor(inputs["x"]).requires_grad_(True)
        denoms = opt_tensor(inputs, "sample_denoms")
        y = Reducer(tensor(inputs["mask"]), o["aggregation"], None if denoms is None else denoms.tolist(),
                    o.get("divisor", 0.0))(x)
        y.backward()
        return {"reduce": out(y), "grad/x": out(x.grad)}
    if kind == "loss":
        return run_loss(o, inputs)
    if kind == "value_loss":
        values = tensor(inputs["values"]).requires_grad_(True)
        loss, metrics = value_loss(o, values, tensor(inputs["old_values"]), tensor(inputs["returns"]),
                                   tensor(inputs["mask"]))
        loss.backward()
        return loss_outputs(loss, metrics, {"values": values.grad})
    if kind == "model":
        return run_model(o, inputs)
    raise ValueError("unknown case kind %r" % kind)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    with open(sys.argv[1]) as f:
        cases = json.load(f)["cases"]
    results, skipped = {}, {}
    for case in cases:
        try:
            results[case["name"]] = run_case(case)
        except ImportError as e:
            skipped[case["name"]] = "%s (%r)" % ("transformers is not importable", e)
    with open(sys.argv[2], "w") as f:
        json.dump({"torch": torch.__version__, "results": results, "skipped": skipped}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
