/*
 * The least a Cortex-M4F needs before main: a vector table (the stack's top, the reset handler, a
 * handler that reports a fault), the FPU turned on, .data copied and .bss zeroed, newlib's
 * semihosting set up (printf goes to the host through QEMU), then main, then exit with its code.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern uint32_t __data_start, __data_end, __data_load, __bss_start, __bss_end, __stack_top;

int main(void);
void initialise_monitor_handles(void);
void reset_handler(void);
void fault_handler(void);

/* The Cortex-M vector table: initial stack pointer, reset, NMI, HardFault, MemManage, BusFault,
 * UsageFault. */
__attribute__((section(".vectors"), used)) static const uintptr_t vectors[7] = {
    (uintptr_t)&__stack_top,
    (uintptr_t)reset_handler,
    (uintptr_t)fault_handler,
    (uintptr_t)fault_handler,
    (uintptr_t)fault_handler,
    (uintptr_t)fault_handler,
    (uintptr_t)fault_handler,
};

void reset_handler(void) {
    /* CPACR: full access to CP10 and CP11, the FPU, before any floating-point instruction */
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= 0xFu << 20;
    __asm__ volatile("dsb\n\tisb");
    memcpy(&__data_start, &__data_load, (size_t)((char *)&__data_end - (char *)&__data_start));
    memset(&__bss_start, 0, (size_t)((char *)&__bss_end - (char *)&__bss_start));
    initialise_monitor_handles();
    exit(main());
}

void fault_handler(void) {
    printf("error: a fault\n");
    exit(3);
}
