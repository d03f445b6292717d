#include "server/tables/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/common/checked_math.h"
#include "server/common/status_macros.h"

namespace posenc {
namespace {

using ScalingType = RopeScalingSpec::Type;

constexpr double kPi = 3.14159265358979323846;

absl::Status MustBePositive(absl::string_view field, double v) {
  if (!(v > 0) || !std::isfinite(v)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", v, "; it must be > 0"));
  }
  return absl::OkStatus();
}

absl::Status MustBePositive(absl::string_view field, int64_t v) {
  if (v <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, " is ", v, "; it must be > 0"));
  }
  return absl::OkStatus();
}

// A multiplier of the frequencies: > 0 (the old message), then within the finite range.
absl::Status CheckFactor(absl::string_view field, double v) {
  RETURN_IF_ERROR(MustBePositive(field, v));
  return CheckInRange(field, v, kMinRopeFactor, kMaxRopeFactor);
}

absl::Status Missing(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, " is unset; ", why));
}

absl::Status CheckFactorList(absl::string_view field, const std::vector<double>& factors,
                             int rotary_dim) {
  const size_t want = static_cast<size_t>(rotary_dim / 2);
  if (factors.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " has ", factors.size(), " entries; it needs rotary_dim/2 = ", want));
  }
  for (size_t i = 0; i < factors.size(); ++i) {
    RETURN_IF_ERROR(CheckFactor(absl::StrCat(field, "[", i, "]"), factors[i]));
  }
  return absl::OkStatus();
}

// HF's YARN reads `beta or default`: an explicit 0 counts as unset.
double BetaOr(const std::optional<double>& beta, double fallback) {
  return beta.has_value() && *beta != 0 ? *beta : fallback;
}

// The factor YARN and LONGROPE use: the given one, else max / original (HF v5).
std::optional<double> ExtensionFactor(const RopeScalingSpec& s) {
  if (s.factor.has_value()) return s.factor;
  if (s.max_position_embeddings.has_value() && s.original_max_position_embeddings.has_value() &&
      *s.original_max_position_embeddings > 0) {
    return static_cast<double>(*s.max_position_embeddings) /
           static_cast<double>(*s.original_max_position_embeddings);
  }
  return std::nullopt;
}

double YarnMscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// base^(-2i/d) for i in [0, d/2), as HF writes it: 1 / base^(2i/d).
// Every RoPE request computes these; the last (base, d) a thread saw is kept, since a
// server mostly sees one model's: the pow calls were 5% of a small request.
std::vector<double> DefaultInvFreq(double base, int rotary_dim) {
  struct Last {
    double base = 0;
    int rotary_dim = 0;
    std::vector<double> inv;
  };
  thread_local Last last;
  // Bases reaching here are validated > 0, so == means the same value.
  if (last.rotary_dim == rotary_dim && last.base == base) return last.inv;
  std::vector<double> inv(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / rotary_dim);
  }
  last = {base, rotary_dim, inv};
  return inv;
}

// A given attention factor (YARN, LONGROPE) multiplies cos and sin.
absl::Status CheckAttentionFactor(const RopeScalingSpec& s) {
  if (!s.attention_factor) return absl::OkStatus();
  RETURN_IF_ERROR(MustBePositive("rope.scaling.attention_factor", *s.attention_factor));
  return CheckInRange("rope.scaling.attention_factor", *s.attention_factor, kMinAttentionFactor,
                      kMaxAttentionFactor);
}

// The factor YARN and LONGROPE derive from max / original must be in range like a given one.
absl::Status CheckExtensionFactor(const RopeScalingSpec& s) {
  const std::optional<double> factor = ExtensionFactor(s);
  if (s.factor.has_value() || !factor.has_value()) return absl::OkStatus();
  return CheckInRange(
      "rope.scaling.factor (max_position_embeddings / "
      "original_max_position_embeddings)",
      *factor, kMinRopeFactor, kMaxRopeFactor);
}

// One function pair per scaling type, as HF's modeling_rope_utils keeps one
// _compute_*_rope_parameters each: the checks of the type's fields, then its frequencies.
// Compute functions run only after their Validate passed.

absl::Status ValidateNone(const RopeScalingSpec&, double, int) { return absl::OkStatus(); }

RopeFrequencies ComputeNone(const RopeScalingSpec&, double base, int rotary_dim, int64_t) {
  RopeFrequencies out;
  out.inv_freq = DefaultInvFreq(base, rotary_dim);
  return out;
}

absl::Status ValidateLinear(const RopeScalingSpec& s, double, int) {
  if (!s.factor) return Missing("rope.scaling.factor", "LINEAR scaling needs it");
  return absl::OkStatus();
}

RopeFrequencies ComputeLinear(const RopeScalingSpec& s, double base, int rotary_dim, int64_t) {
  RopeFrequencies out;
  out.inv_freq = DefaultInvFreq(base, rotary_dim);
  for (double& f : out.inv_freq) f /= *s.factor;
  return out;
}

absl::Status ValidateDynamic(const RopeScalingSpec& s, double, int) {
  if (!s.factor) return Missing("rope.scaling.factor", "DYNAMIC scaling needs it");
  if (s.max_position_embeddings) {
    return MustBePositive("rope.scaling.max_position_embeddings", *s.max_position_embeddings);
  }
  if (s.original_max_position_embeddings) {
    return MustBePositive("rope.scaling.original_max_position_embeddings",
                          *s.original_max_position_embeddings);
  }
  return Missing("rope.scaling.max_position_embeddings",
                 "DYNAMIC scaling needs the length beyond which it starts");
}

RopeFrequencies ComputeDynamic(const RopeScalingSpec& s, double base, int rotary_dim,
                               int64_t seq_len) {
  const double factor = *s.factor, dim = rotary_dim;
  const double max_pos = static_cast<double>(
      s.max_position_embeddings ? *s.max_position_embeddings : *s.original_max_position_embeddings);
  const double len = std::max(static_cast<double>(seq_len), max_pos);
  double scaled_base = base;
  // With rotary_dim 2 the only frequency is base^0 = 1 whatever the base, and HF's
  // exponent dim/(dim-2) would be infinite.
  if (rotary_dim > 2) {
    scaled_base = base * std::pow((factor * len / max_pos) - (factor - 1), dim / (dim - 2));
  }
  RopeFrequencies out;
  out.inv_freq = DefaultInvFreq(scaled_base, rotary_dim);
  return out;
}

absl::Status CheckMscales(const RopeScalingSpec& s) {
  for (const auto& [field, v] : {std::pair{"rope.scaling.mscale", s.mscale},
                                 std::pair{"rope.scaling.mscale_all_dim", s.mscale_all_dim}}) {
    if (v && (!(*v >= 0) || !std::isfinite(*v))) {
      return absl::InvalidArgumentError(absl::StrCat(field, " is ", *v, "; it must be >= 0"));
    }
    if (v) RETURN_IF_ERROR(CheckInRange(field, *v, 0.0, kMaxRopeFactor));
  }
  return absl::OkStatus();
}

absl::Status ValidateYarn(const RopeScalingSpec& s, double base, int) {
  if (base == 1.0) {
    return absl::InvalidArgumentError(
        "rope.base is 1; YARN divides by log(base), so it must not be 1");
  }
  if (s.original_max_position_embeddings) {
    RETURN_IF_ERROR(MustBePositive("rope.scaling.original_max_position_embeddings",
                                   *s.original_max_position_embeddings));
  }
  if (s.max_position_embeddings) {
    RETURN_IF_ERROR(
        MustBePositive("rope.scaling.max_position_embeddings", *s.max_position_embeddings));
  }
  if (!s.original_max_position_embeddings && !s.max_position_embeddings) {
    return Missing("rope.scaling.original_max_position_embeddings",
                   "YARN needs the pretrained context length");
  }
  if (!ExtensionFactor(s)) {
    return Missing("rope.scaling.factor",
                   "YARN needs it (or max_position_embeddings and "
                   "original_max_position_embeddings to derive it)");
  }
  RETURN_IF_ERROR(CheckExtensionFactor(s));
  if (s.beta_fast && *s.beta_fast != 0) {
    RETURN_IF_ERROR(CheckFactor("rope.scaling.beta_fast", *s.beta_fast));
  }
  if (s.beta_slow && *s.beta_slow != 0) {
    RETURN_IF_ERROR(CheckFactor("rope.scaling.beta_slow", *s.beta_slow));
  }
  RETURN_IF_ERROR(CheckMscales(s));
  return CheckAttentionFactor(s);
}

double YarnAttentionFactor(const RopeScalingSpec& s, double factor) {
  if (s.attention_factor) return *s.attention_factor;
  if (s.mscale && *s.mscale != 0 && s.mscale_all_dim && *s.mscale_all_dim != 0) {
    return YarnMscale(factor, *s.mscale) / YarnMscale(factor, *s.mscale_all_dim);
  }
  return YarnMscale(factor, 1.0);
}

RopeFrequencies ComputeYarn(const RopeScalingSpec& s, double base, int rotary_dim, int64_t) {
  const double factor = *ExtensionFactor(s), dim = rotary_dim;
  const double original =
      static_cast<double>(s.original_max_position_embeddings ? *s.original_max_position_embeddings
                                                             : *s.max_position_embeddings);
  RopeFrequencies out;
  out.attention_factor = YarnAttentionFactor(s, factor);
  // The feature index at which a wavelength completes `rotations` turns over the
  // pretrained context.
  auto correction_dim = [&](double rotations) {
    return dim * std::log(original / (rotations * 2 * kPi)) / (2 * std::log(base));
  };
  double low = correction_dim(BetaOr(s.beta_fast, 32.0));
  double high = correction_dim(BetaOr(s.beta_slow, 1.0));
  if (s.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // HF: prevents a division by zero
  out.inv_freq.resize(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < out.inv_freq.size(); ++i) {
    const double pos_freq = std::pow(base, static_cast<double>(2 * i) / dim);
    const double extrapolation = 1.0 / pos_freq;
    const double interpolation = 1.0 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    out.inv_freq[i] =
        interpolation * (1 - extrapolation_weight) + extrapolation * extrapolation_weight;
  }
  return out;
}

absl::Status ValidateLlama3(const RopeScalingSpec& s, double, int) {
  if (!s.factor) return Missing("rope.scaling.factor", "LLAMA3 scaling needs it");
  if (!s.original_max_position_embeddings) {
    return Missing("rope.scaling.original_max_position_embeddings",
                   "LLAMA3 scaling needs the pretrained context length");
  }
  RETURN_IF_ERROR(MustBePositive("rope.scaling.original_max_position_embeddings",
                                 *s.original_max_position_embeddings));
  const double low = s.low_freq_factor.value_or(1.0);
  const double high = s.high_freq_factor.value_or(4.0);
  RETURN_IF_ERROR(MustBePositive("rope.scaling.low_freq_factor", low));
  RETURN_IF_ERROR(MustBePositive("rope.scaling.high_freq_factor", high));
  // Equal factors (Llama 4: both 1) leave no band to smooth over.
  if (high < low) {
    return absl::InvalidArgumentError(absl::StrCat("rope.scaling.high_freq_factor is ", high,
                                                   "; it must be at least low_freq_factor (", low,
                                                   ")"));
  }
  return absl::OkStatus();
}

RopeFrequencies ComputeLlama3(const RopeScalingSpec& s, double base, int rotary_dim, int64_t) {
  const double factor = *s.factor;
  const double low_freq_factor = s.low_freq_factor.value_or(1.0);
  const double high_freq_factor = s.high_freq_factor.value_or(4.0);
  const double old_context = static_cast<double>(*s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / low_freq_factor;
  const double high_freq_wavelen = old_context / high_freq_factor;
  RopeFrequencies out;
  out.inv_freq = DefaultInvFreq(base, rotary_dim);
  for (double& f : out.inv_freq) {
    const double wavelen = 2 * kPi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / factor;
    } else if (!(wavelen < high_freq_wavelen) && high_freq_factor > low_freq_factor) {
      const double smooth =
          (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      f = (1 - smooth) * f / factor + smooth * f;
    }
  }
  return out;
}

absl::Status ValidateLongRope(const RopeScalingSpec& s, double, int rotary_dim) {
  RETURN_IF_ERROR(CheckFactorList("rope.scaling.short_factor", s.short_factor, rotary_dim));
  RETURN_IF_ERROR(CheckFactorList("rope.scaling.long_factor", s.long_factor, rotary_dim));
  if (!s.original_max_position_embeddings) {
    return Missing("rope.scaling.original_max_position_embeddings",
                   "LONGROPE needs the pretrained context length");
  }
  RETURN_IF_ERROR(MustBePositive("rope.scaling.original_max_position_embeddings",
                                 *s.original_max_position_embeddings));
  if (s.max_position_embeddings) {
    RETURN_IF_ERROR(
        MustBePositive("rope.scaling.max_position_embeddings", *s.max_position_embeddings));
  }
  if (!ExtensionFactor(s)) {
    return Missing("rope.scaling.factor",
                   "LONGROPE needs it or max_position_embeddings to derive it");
  }
  RETURN_IF_ERROR(CheckExtensionFactor(s));
  if (!s.attention_factor && *ExtensionFactor(s) > 1.0 && *s.original_max_position_embeddings < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope.scaling.original_max_position_embeddings is ", *s.original_max_position_embeddings,
        "; LONGROPE's attention factor divides by its log, so it must be >= 2"));
  }
  return CheckAttentionFactor(s);
}

RopeFrequencies ComputeLongRope(const RopeScalingSpec& s, double base, int rotary_dim,
                                int64_t seq_len) {
  const double factor = *ExtensionFactor(s), dim = rotary_dim;
  const int64_t original = *s.original_max_position_embeddings;
  RopeFrequencies out;
  out.attention_factor =
      s.attention_factor ? *s.attention_factor
      : factor <= 1.0    ? 1.0
                      : std::sqrt(1 + std::log(factor) / std::log(static_cast<double>(original)));
  const std::vector<double>& ext = seq_len > original ? s.long_factor : s.short_factor;
  out.inv_freq.resize(static_cast<size_t>(rotary_dim / 2));
  for (size_t i = 0; i < out.inv_freq.size(); ++i) {
    out.inv_freq[i] = 1.0 / (ext[i] * std::pow(base, static_cast<double>(2 * i) / dim));
  }
  return out;
}

absl::Status ValidateProportional(const RopeScalingSpec& s, double, int) {
  if (s.rope_proportion) {
    const double p = *s.rope_proportion;
    if (!(p >= 0) || !(p <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.scaling.rope_proportion is ", p, "; it must be in [0, 1]"));
    }
  }
  return absl::OkStatus();
}

// HF _compute_proportional_rope_parameters: n = floor(rope_proportion * R / 2) slots turn at
// base^(-2k/R) / factor (the head's full R in the exponent), the rest not at all.
RopeFrequencies ComputeProportional(const RopeScalingSpec& s, double base, int rotary_dim,
                                    int64_t) {
  const double factor = s.factor.value_or(1.0);
  const size_t half = static_cast<size_t>(rotary_dim / 2);
  const size_t turning = std::min(
      half, static_cast<size_t>(std::floor(s.rope_proportion.value_or(1.0) * rotary_dim / 2)));
  RopeFrequencies out;
  out.inv_freq = DefaultInvFreq(base, rotary_dim);
  for (size_t i = 0; i < half; ++i) out.inv_freq[i] = i < turning ? out.inv_freq[i] / factor : 0.0;
  return out;
}

struct ScalingRule {
  absl::Status (*validate)(const RopeScalingSpec& s, double base, int rotary_dim);
  RopeFrequencies (*compute)(const RopeScalingSpec& s, double base, int rotary_dim,
                             int64_t seq_len);
};

const ScalingRule* RuleOf(ScalingType type) {
  static const ScalingRule kNone{ValidateNone, ComputeNone}, kLinear{ValidateLinear, ComputeLinear},
      kDynamic{ValidateDynamic, ComputeDynamic}, kYarn{ValidateYarn, ComputeYarn},
      kLlama3{ValidateLlama3, ComputeLlama3}, kLongRope{ValidateLongRope, ComputeLongRope},
      kProportional{ValidateProportional, ComputeProportional};
  switch (type) {
    case ScalingType::kNone: return &kNone;
    case ScalingType::kLinear: return &kLinear;
    case ScalingType::kDynamic: return &kDynamic;
    case ScalingType::kYarn: return &kYarn;
    case ScalingType::kLlama3: return &kLlama3;
    case ScalingType::kLongRope: return &kLongRope;
    case ScalingType::kProportional: return &kProportional;
  }
  return nullptr;
}

absl::Status ValidateScaling(const RopeScalingSpec& s, double base, int rotary_dim) {
  if (s.factor.has_value() && s.type != ScalingType::kNone) {
    RETURN_IF_ERROR(CheckFactor("rope.scaling.factor", *s.factor));
  }
  const ScalingRule* rule = RuleOf(s.type);
  if (rule == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.scaling.type is ", static_cast<int>(s.type), "; unknown"));
  }
  return rule->validate(s, base, rotary_dim);
}

absl::Status ValidateMrope(const RopeSpec& spec, int rotary_dim) {
  const std::vector<int>& sections = spec.mrope_section;
  if (sections.size() > static_cast<size_t>(kMaxRopeAxes)) {
    return absl::InvalidArgumentError(absl::StrCat("rope.mrope_section has ", sections.size(),
                                                   " entries; at most ", kMaxRopeAxes));
  }
  int64_t sum = 0;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("rope.mrope_section[", i, "] is ", sections[i], "; it must be >= 0"));
    }
    sum += sections[i];
  }
  if (sum != rotary_dim / 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope.mrope_section sums to ", sum, "; it must sum to rotary_dim/2 = ", rotary_dim / 2));
  }
  if (spec.mrope_interleaved && sections.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.mrope_section has ", sections.size(),
                     " entries; rope.mrope_interleaved needs 3 (time, height, width)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateAxes(const RopeSpec& spec, int rotary_dim) {
  if (spec.mrope_interleaved && spec.mrope_section.empty()) {
    return absl::InvalidArgumentError("rope.mrope_interleaved is set; it needs rope.mrope_section");
  }
  if (!spec.mrope_section.empty() && spec.axial_axes != 0) {
    return absl::InvalidArgumentError(
        "rope.axial_axes is set with rope.mrope_section; give one of the two");
  }
  if (!spec.mrope_section.empty()) return ValidateMrope(spec, rotary_dim);
  if (spec.axial_axes == 0) return absl::OkStatus();
  if (spec.axial_axes < 0 || spec.axial_axes > kMaxRopeAxes) {
    return absl::InvalidArgumentError(absl::StrCat("rope.axial_axes is ", spec.axial_axes,
                                                   "; it must be in [0, ", kMaxRopeAxes, "]"));
  }
  if (rotary_dim % (2 * spec.axial_axes) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.rotary_dim is ", rotary_dim, "; rope.axial_axes ", spec.axial_axes,
                     " needs a multiple of 2 * axial_axes = ", 2 * spec.axial_axes));
  }
  if (spec.scaling.type != ScalingType::kNone) {
    return absl::InvalidArgumentError(
        "rope.scaling.type is set with rope.axial_axes; axial RoPE takes no scaling (NONE)");
  }
  return absl::OkStatus();
}

absl::Status ValidateXpos(const RopeSpec& spec) {
  if (!spec.xpos_scale_base) {
    if (spec.xpos_center) {
      return Missing("rope.xpos_scale_base", "rope.xpos_center is set, and xPos needs it");
    }
    return absl::OkStatus();
  }
  const double scale_base = *spec.xpos_scale_base;
  RETURN_IF_ERROR(MustBePositive("rope.xpos_scale_base", scale_base));
  if (scale_base < kMinXposScaleBase) {
    return absl::InvalidArgumentError(absl::StrCat("rope.xpos_scale_base is ", scale_base,
                                                   "; it must be >= ", kMinXposScaleBase));
  }
  if (spec.xpos_center && (*spec.xpos_center < 0 || *spec.xpos_center > (int64_t{1} << 40))) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.xpos_center is ", *spec.xpos_center, "; it must be in [0, 2^40]"));
  }
  return absl::OkStatus();
}

// Which axis each frequency slot takes (rope_frequencies.h, RopeSpec).
std::vector<uint8_t> SlotAxes(const RopeSpec& spec, int rotary_dim) {
  const int half = rotary_dim / 2;
  std::vector<uint8_t> axis(static_cast<size_t>(half), 0);
  const std::vector<int>& sections = spec.mrope_section;
  if (!sections.empty() && spec.mrope_interleaved) {
    // HF apply_interleaved_mrope: slots 1, 4, 7, ... below 3 * section[1] are height,
    // 2, 5, 8, ... below 3 * section[2] width, the rest time.
    for (int f = 0; f < half; ++f) {
      const int a = f % 3;
      if (a != 0 && f < 3 * sections[a]) axis[f] = static_cast<uint8_t>(a);
    }
  } else if (!sections.empty()) {
    // HF apply_multimodal_rotary_pos_emb: consecutive sections, axis i for section i.
    int f = 0;
    for (size_t a = 0; a < sections.size(); ++a) {
      for (int j = 0; j < sections[a]; ++j) axis[f++] = static_cast<uint8_t>(a);
    }
  } else if (spec.axial_axes > 0) {
    const int per_axis = half / spec.axial_axes;
    for (int f = 0; f < half; ++f) axis[f] = static_cast<uint8_t>(f / per_axis);
  }
  return axis;
}

}  // namespace

absl::Status ValidateRopeSpec(const RopeSpec& spec, int rotary_dim) {
  const double base = spec.base.value_or(kDefaultRopeBase);
  RETURN_IF_ERROR(MustBePositive("rope.base", base));
  if (base < kMinRopeBase) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.base is ", base, "; it must be >= ", kMinRopeBase,
                     " (a smaller base makes the frequencies overflow)"));
  }
  if (rotary_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.rotary_dim is ", rotary_dim, "; it must be > 0"));
  }
  if (rotary_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope.rotary_dim is ", rotary_dim, "; it must be even"));
  }
  RETURN_IF_ERROR(ValidateScaling(spec.scaling, base, rotary_dim));
  RETURN_IF_ERROR(ValidateAxes(spec, rotary_dim));
  return ValidateXpos(spec);
}

absl::StatusOr<RopeFrequencies> ComputeRopeFrequencies(const RopeSpec& spec, int rotary_dim,
                                                       int64_t seq_len) {
  RETURN_IF_ERROR(ValidateRopeSpec(spec, rotary_dim));
  const double base = spec.base.value_or(kDefaultRopeBase);
  RopeFrequencies out;
  if (spec.axial_axes > 0) {
    // Every axis turns by the same frequencies, base^(-2k / (rotary_dim / axial_axes)).
    const int per_axis_dim = rotary_dim / spec.axial_axes;
    const std::vector<double> axis_freq = DefaultInvFreq(base, per_axis_dim);
    for (int a = 0; a < spec.axial_axes; ++a) {
      out.inv_freq.insert(out.inv_freq.end(), axis_freq.begin(), axis_freq.end());
    }
  } else {
    out = RuleOf(spec.scaling.type)->compute(spec.scaling, base, rotary_dim, seq_len);
  }
  out.num_axes = spec.num_axes();
  if (!spec.mrope_section.empty() || spec.axial_axes > 0) {
    out.slot_axis = SlotAxes(spec, rotary_dim);
  }
  if (spec.xpos_scale_base) {
    // FlashAttention centres at seqlen // 2, seqlen the length the cache covers.
    out.xpos = XposParams{*spec.xpos_scale_base, spec.xpos_center.value_or(seq_len / 2)};
  }
  for (size_t i = 0; i < out.inv_freq.size(); ++i) {
    if (!std::isfinite(out.inv_freq[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rope.scaling: these parameters give a non-finite inverse frequency at index ", i));
    }
  }
  // A computed factor (mscale / mscale_all_dim, LONGROPE's from factor and original) too.
  if (!(out.attention_factor >= kMinAttentionFactor) ||
      !(out.attention_factor <= kMaxAttentionFactor)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope.scaling: these parameters (attention_factor, mscale, mscale_all_dim, factor) "
        "give an attention factor of ",
        out.attention_factor, "; it must be in [", kMinAttentionFactor, ", ", kMaxAttentionFactor,
        "]"));
  }
  return out;
}

namespace {

// zeta_f^((p - c) / scale_base), FlashAttention's xPos scale of slot f (R = rotary_dim).
double XposScale(const XposParams& xpos, size_t f, size_t half, int64_t position) {
  const double r = static_cast<double>(2 * half);
  const double zeta = (static_cast<double>(2 * f) + 0.4 * r) / (1.4 * r);
  const double power = static_cast<double>(position - xpos.center) / xpos.scale_base;
  return std::pow(zeta, power);
}

// The one place a cos/sin row is computed: slot f at axis_positions[slot_axis[f]] (one
// position for every slot when axis_positions has one entry).
void FillRow(const RopeFrequencies& freqs, absl::Span<const int64_t> axis_positions,
             float* query_row, float* key_row) {
  const size_t half = freqs.inv_freq.size();
  const double scale = freqs.attention_factor;
  const bool per_slot = axis_positions.size() > 1 && !freqs.slot_axis.empty();
  for (size_t i = 0; i < half; ++i) {
    const int64_t position = axis_positions[per_slot ? freqs.slot_axis[i] : 0];
    const double angle = static_cast<double>(position) * freqs.inv_freq[i];
    const double c = std::cos(angle), s = std::sin(angle);
    if (!freqs.xpos) {
      query_row[i] = static_cast<float>(scale * c);
      query_row[half + i] = static_cast<float>(scale * s);
      if (key_row != nullptr) key_row[i] = query_row[i], key_row[half + i] = query_row[half + i];
      continue;
    }
    const double zeta = XposScale(*freqs.xpos, i, half, position);
    query_row[i] = static_cast<float>(scale * c * zeta);
    query_row[half + i] = static_cast<float>(scale * s * zeta);
    if (key_row != nullptr) {
      key_row[i] = static_cast<float>(scale * c / zeta);
      key_row[half + i] = static_cast<float>(scale * s / zeta);
    }
  }
}

}  // namespace

void FillRopeRows(const RopeFrequencies& freqs, absl::Span<const int64_t> positions, float* out) {
  const size_t width = 2 * freqs.inv_freq.size();
  for (size_t r = 0; r < positions.size(); ++r) {
    FillRow(freqs, positions.subspan(r, 1), out + r * width, nullptr);
  }
}

void FillRopeRowRange(const RopeFrequencies& freqs, int64_t first, int64_t n, float* out) {
  const size_t width = 2 * freqs.inv_freq.size();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t p = first + r;
    FillRow(freqs, absl::MakeConstSpan(&p, 1), out + static_cast<size_t>(r) * width, nullptr);
  }
}

void FillRopeTokenRow(const RopeFrequencies& freqs, absl::Span<const int64_t> axis_positions,
                      float* query_row, float* key_row) {
  FillRow(freqs, axis_positions, query_row, key_row);
}

void FillRopeQueryKeyRowRange(const RopeFrequencies& freqs, int64_t first, int64_t n, float* out) {
  const size_t width = 2 * freqs.inv_freq.size();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t p = first + r;
    float* row = out + static_cast<size_t>(r) * 2 * width;
    FillRow(freqs, absl::MakeConstSpan(&p, 1), row, row + width);
  }
}

std::string RopeCacheKey(const RopeFrequencies& freqs, int64_t first, int64_t rows) {
  // The doubles go in as their raw bytes: exact, and on every request's path, where
  // formatting 64 of them with %a cost about 1.7 us.
  std::string key =
      absl::StrCat("rope|first=", first, "|rows=", rows, "|half=", freqs.inv_freq.size(), "|");
  if (freqs.xpos) {
    // Query and key rows; the scale base's raw bits keep the key exact.
    uint64_t bits = 0;
    std::memcpy(&bits, &freqs.xpos->scale_base, sizeof(bits));
    absl::StrAppend(&key, "xpos=", bits, ",", freqs.xpos->center, "|");
  }
  const size_t head = key.size();
  key.resize(head + (1 + freqs.inv_freq.size()) * sizeof(double));
  std::memcpy(key.data() + head, &freqs.attention_factor, sizeof(double));
  if (!freqs.inv_freq.empty()) {
    std::memcpy(key.data() + head + sizeof(double), freqs.inv_freq.data(),
                freqs.inv_freq.size() * sizeof(double));
  }
  return key;
}

bool RopeFrequenciesReadLength(const RopeSpec& spec) {
  return spec.scaling.type == ScalingType::kDynamic ||
         spec.scaling.type == ScalingType::kLongRope ||
         (spec.xpos_scale_base.has_value() && !spec.xpos_center.has_value());
}

namespace {

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(double)) == 0; }

bool SameBits(const std::optional<double>& a, const std::optional<double>& b) {
  return a.has_value() == b.has_value() && (!a || SameBits(*a, *b));
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

bool SameScaling(const RopeScalingSpec& a, const RopeScalingSpec& b) {
  return a.type == b.type && SameBits(a.factor, b.factor) && SameBits(a.beta_fast, b.beta_fast) &&
         SameBits(a.beta_slow, b.beta_slow) && SameBits(a.mscale, b.mscale) &&
         SameBits(a.mscale_all_dim, b.mscale_all_dim) &&
         SameBits(a.attention_factor, b.attention_factor) &&
         SameBits(a.low_freq_factor, b.low_freq_factor) &&
         SameBits(a.high_freq_factor, b.high_freq_factor) &&
         a.original_max_position_embeddings == b.original_max_position_embeddings &&
         a.max_position_embeddings == b.max_position_embeddings &&
         SameBits(a.short_factor, b.short_factor) && SameBits(a.long_factor, b.long_factor) &&
         a.truncate == b.truncate && SameBits(a.rope_proportion, b.rope_proportion);
}

// A field added to either struct must be compared above (and in SameRopeSpec): these sizes
// are the fields listed there, on x86-64 with libstdc++.
static_assert(sizeof(RopeScalingSpec) == 240, "compare the new field in SameScaling");
static_assert(sizeof(RopeSpec) == 336, "compare the new field in SameRopeSpec");

}  // namespace

bool SameRopeSpec(const RopeSpec& a, const RopeSpec& b) {
  return SameBits(a.base, b.base) && a.rotary_dim == b.rotary_dim && a.style == b.style &&
         a.layout == b.layout && SameScaling(a.scaling, b.scaling) &&
         a.mrope_section == b.mrope_section && a.mrope_interleaved == b.mrope_interleaved &&
         a.axial_axes == b.axial_axes && SameBits(a.xpos_scale_base, b.xpos_scale_base) &&
         a.xpos_center == b.xpos_center;
}

absl::StatusOr<const RopeFrequencies*> RopeFrequencyMemo::Get(const RopeSpec& spec, int rotary_dim,
                                                              int64_t seq_len) {
  if (valid_ && rotary_dim == rotary_dim_ && SameRopeSpec(spec, spec_) &&
      (seq_len == seq_len_ || !RopeFrequenciesReadLength(spec))) {
    return &freqs_;
  }
  valid_ = false;
  ASSIGN_OR_RETURN(freqs_, ComputeRopeFrequencies(spec, rotary_dim, seq_len));
  spec_ = spec;
  rotary_dim_ = rotary_dim;
  seq_len_ = seq_len;
  key_rows_ = -1;
  valid_ = true;
  return &freqs_;
}

const std::string& RopeFrequencyMemo::PrefixTableKey(int64_t rows) {
  if (rows != key_rows_) {
    key_ = RopeCacheKey(freqs_, 0, rows);
    key_rows_ = rows;
  }
  return key_;
}

}  // namespace posenc
