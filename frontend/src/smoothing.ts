// TensorBoard's scalar smoothing: an exponential moving average, debiased so
// the first points are not pulled towards zero. Missing and non-finite values
// stay missing and do not enter the average.

export function smooth(values: readonly (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return [...values];
  let last = 0;
  let count = 0;
  return values.map((value) => {
    if (value === null || !Number.isFinite(value)) return null;
    last = last * weight + (1 - weight) * value;
    count += 1;
    return last / (1 - Math.pow(weight, count));
  });
}
