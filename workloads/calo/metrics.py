"""The names of the calo workload's validation metrics, as plain data (the CLI reads them without NumPy)."""

#: feature groups of the separation power, by the prefix of their high-level features
GROUPS = {"sep_etot": "etot_ratio", "sep_layer_energy": "e_layer", "sep_centre_x": "ec_x", "sep_centre_y": "ec_y",
          "sep_width_x": "width_x", "sep_width_y": "width_y", "sep_sparsity": "sparsity"}

#: Summary metrics a quality gate may bound (all lower is better; an AUC is best at 0.5).
GATE_METRICS = {
    "sep_power_mean": "separation power of the high-level feature histograms, mean over all 271 (0 = identical, 1 = disjoint)",
    "sep_power_max": "separation power of the worst high-level feature",
    "sep_etot": "separation power of E_dep / E_inc",
    "sep_layer_energy": "separation power of the energy per layer, mean over the layers",
    "sep_centre_x": "separation power of the centre of energy in x, mean over the layers",
    "sep_centre_y": "separation power of the centre of energy in y, mean over the layers",
    "sep_width_x": "separation power of the shower width in x, mean over the layers",
    "sep_width_y": "separation power of the shower width in y, mean over the layers",
    "sep_sparsity": "separation power of the share of cells hit, mean over the layers",
    "etot_ratio_rel_error": "relative error of the mean E_dep / E_inc",
    "fpd": "Fréchet physics distance of the compact high-level features (0 = same distribution)",
    "kpd": "kernel physics distance of the compact high-level features (0 = same distribution)",
    "classifier_auc": "AUC of a classifier telling model from MC showers on their cells (0.5 = indistinguishable)",
    "hl_classifier_auc": "AUC of a classifier telling model from MC showers on their high-level features (0.5 = indistinguishable)",
}
#: What a scan can minimise after every epoch (no classifier, no FPD: those are for the full report).
EPOCH_METRICS = ("sep_power_mean", "sep_power_max", "sep_etot", "sep_layer_energy", "sep_width_x", "sep_sparsity", "etot_ratio_rel_error")
#: What the verdict and a scan's result line show, next to their noise floor.
VERDICT_METRICS = ("sep_power_mean", "sep_etot", "etot_ratio_rel_error", "fpd", "classifier_auc", "hl_classifier_auc")
