#pragma once
// What a softmax-family call computes and how it reduces: plain enums shared by the host description
// (softmax_problem.h) and the kernel parameters (softmax_launch.h), which must not pull in ATen.

namespace flash_attn_ext {

enum class SoftmaxAlgorithm { Auto, Safe, Online };
enum class SoftmaxOutput { Softmax, LogSoftmax, LogSumExp };

}  // namespace flash_attn_ext
